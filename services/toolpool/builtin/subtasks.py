"""``create_subtasks``: an agent grows the task DAG the dispatcher walks (seed 001, pattern 2).

It creates SpecTask objects (status ``pending``), the ``blocks`` relationships among them and
to existing tasks, and optionally a synthesis task blocked by all of them — in one
transaction, under the project's DAG lock, after a cycle check: on any error nothing is
stored. New tasks join the task graph given, else the graph of the task the calling run
works on, else the graph of the existing tasks they reference, else the calling run's own
task graph: created by its first such call (title "subtasks of run <id>", label
``created_by_run_id``) and reused by the next ones. So every SpecTask belongs to a TaskGraph
and the dispatcher, which only walks graphs, runs them; the graph id in the result lets the
caller (or a user) watch, cancel or grow them like any graph. Tasks are never added to a
cancelled graph (they would never run).

Tasks run with the limits of the agent that made them. The calling run's definition (read
from the run, never from arguments) must declare ``config.subtask_agents``, the agent names
or globs its tasks may run with: assigned agents outside it are refused, and each task
records it as ``allowed_agents`` so the dispatcher chooses an unassigned task's agent among
those only. Each task records the run as ``created_by_run_id``; the executor starts the
task's run one level below it (depth, steps and token budget no larger than its creator's),
so a run at the depth cap (2) cannot create tasks at all.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from agentfleet.errors import NotFound
from agentfleet.graph import (
    BLOCKS,
    SPEC_TASK,
    TASK_GRAPH,
    GraphObject,
    GraphRepository,
    NewObject,
    cycle_with_new_edges,
    graph_of_run,
    graph_size_problem,
    graph_task_count,
    lock_task_dag,
    mark_not_ready,
    notify_tasks_added,
    parse_id,
    task_keys_taken,
)
from agentfleet.graph.task_properties import (
    ALLOWED_AGENTS,
    DEFAULT_MAX_RETRIES,
    MAX_RETRIES_LIMIT,
    PRIORITY_MAX,
    PRIORITY_MIN,
)
from services.toolpool.builtin.base import ToolContext, ToolError, builtin_tool
from services.toolpool.builtin.schema_parts import (
    MAX_TEXT,
    array,
    integer,
    obj,
    object_id,
    string,
)
from services.toolpool.builtin.subtask_limits import (
    check_assigned_agents,
    subtask_agents_of_caller,
)

__all__ = ["SUBTASK_TOOLS"]

MAX_SUBTASKS = 50
SYNTHESIS_KEY = "synthesize"
KEY_PATTERN = r"^[A-Za-z0-9._-]{1,128}$"


@dataclass(kw_only=True, slots=True)
class _Plan:
    """The tasks and edges to write, with where each reference came from (for messages)."""

    tasks: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    """(argument path, task arguments), synthesis last."""
    ids: dict[str, str] = field(default_factory=dict)
    """New task key -> id chosen for it."""
    edges: list[tuple[str, str]] = field(default_factory=list)
    """(blocker id, blocked id)."""
    existing: dict[str, str] = field(default_factory=dict)
    """Existing task id -> argument path that referenced it first."""
    blocked_existing: dict[str, str] = field(default_factory=dict)
    """Existing tasks that new tasks block (they must still be pending)."""


def _task_schema(*, with_links: bool, key_required: bool, description: str) -> dict[str, Any]:
    properties: dict[str, Any] = {
        "key": string(
            "Short unique name of the task (letters, digits, '.', '_', '-'), used in blocked_by.",
            max_length=128,
            pattern=KEY_PATTERN,
        ),
        "title": string("Short title; the first line of the agent's prompt.", max_length=500),
        "description": string("What to do, in full.", max_length=MAX_TEXT),
        "assigned_agent": string(
            "Agent to run it, one your definition allows; omitted = the dispatcher chooses "
            "among those."
        ),
        "tags": array("Tags for agent selection.", string("Tag."), max_items=20),
        "priority": integer(
            "Higher runs first among available tasks (default 0).",
            minimum=PRIORITY_MIN,
            maximum=PRIORITY_MAX,
        ),
        "max_retries": integer(
            f"Retries after a failure (default {DEFAULT_MAX_RETRIES}).",
            minimum=0,
            maximum=MAX_RETRIES_LIMIT,
        ),
    }
    if with_links:
        properties["blocked_by"] = array(
            "Tasks that must complete first: keys of tasks in this call or ids of existing tasks.",
            string("Key or task id.", max_length=128),
            max_items=MAX_SUBTASKS,
        )
        properties["blocks"] = array(
            "Ids of existing pending tasks that must wait for this one.",
            object_id("Task id."),
            max_items=MAX_SUBTASKS,
        )
    required = ("key", "title") if key_required else ("title",)
    return obj(properties, required=required, description=description)


@builtin_tool(
    {
        "tasks": array(
            "The tasks.",
            _task_schema(with_links=True, key_required=True, description="A task."),
            min_items=1,
            max_items=MAX_SUBTASKS,
        ),
        "synthesis": _task_schema(
            with_links=False,
            key_required=False,
            description="A task blocked by all the tasks above (default key 'synthesize').",
        ),
        "graph_id": object_id("Task graph to add them to; default: the graph of the current task."),
    },
    required=("tasks",),
)
async def create_subtasks(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    """Creates tasks for the dispatcher to run, each by an agent, in dependency order: tasks
    run in parallel unless blocked_by says otherwise. Optionally adds a synthesis task that
    runs after all of them (e.g. to combine their results). All or nothing; dependencies may
    not form a cycle."""
    plan = _plan(args)
    async with ctx.repository.transaction() as tx:
        conn = tx.connection
        assert conn is not None
        allowed = await subtask_agents_of_caller(conn, ctx)
        check_assigned_agents([(path, task) for path, task in plan.tasks], allowed)
        await lock_task_dag(conn, ctx.project_id)
        existing = await _existing_tasks(tx, ctx.project_id, plan)
        graph_id = await _graph_id(tx, ctx, args, plan, existing)
        # The same limit as CreateTaskGraph/AddTasks: without it a model grew one graph
        # past it, MAX_SUBTASKS at a time.
        size = await graph_task_count(conn, ctx.project_id, graph_id)
        too_many = graph_size_problem(size, len(plan.tasks))
        if too_many is not None:
            raise ToolError(f"task graph {graph_id} has {size} tasks; {too_many}")
        taken = await task_keys_taken(conn, ctx.project_id, graph_id, list(plan.ids))
        if taken:
            raise ToolError(f"keys already used in task graph {graph_id}: {', '.join(taken)}")
        cycle = await cycle_with_new_edges(conn, ctx.project_id, plan.edges)
        if cycle is not None:
            names = {task_id: key for key, task_id in plan.ids.items()}
            shown = [names.get(node, f"task {node}") for node in [*cycle, cycle[0]]]
            raise ToolError(f"blocks relationships would form a cycle: {' -> '.join(shown)}")
        created = await tx.create_objects(
            ctx.project_id,
            [
                NewObject(
                    id=uuid.UUID(plan.ids[task["key"]]),
                    type=SPEC_TASK,
                    properties=_task_properties(task, graph_id, ctx.run_id, allowed),
                )
                for _, task in plan.tasks
            ],
        )
        await tx.create_relationships(ctx.project_id, [(BLOCKS, s, d) for s, d in plan.edges])
        if plan.blocked_existing:
            await mark_not_ready(conn, ctx.project_id, list(plan.blocked_existing))
        await notify_tasks_added(conn, ctx.project_id, graph_id)
    summaries = [
        {"id": t.id, "key": t.properties["key"], "title": t.properties["title"]} for t in created
    ]
    has_synthesis = "synthesis" in args
    return {
        "graph_id": graph_id,
        "tasks": summaries[:-1] if has_synthesis else summaries,
        "synthesis_task": summaries[-1] if has_synthesis else None,
        "edges": [{"blocker_id": s, "blocked_id": d} for s, d in plan.edges],
    }


def _plan(args: dict[str, Any]) -> _Plan:
    """Keys, ids and edges from the arguments; reference errors name the argument path."""
    plan = _Plan()
    for i, task in enumerate(args["tasks"]):
        plan.tasks.append((f"tasks[{i}]", task))
    if "synthesis" in args:
        plan.tasks.append(("synthesis", {"key": SYNTHESIS_KEY, **args["synthesis"]}))
    for path, task in plan.tasks:
        if task["key"] in plan.ids:
            raise ToolError(f"invalid arguments: {path}.key: {task['key']!r} is used twice")
        plan.ids[task["key"]] = str(uuid.uuid4())
    for path, task in plan.tasks:
        me = plan.ids[task["key"]]
        for j, ref in enumerate(task.get("blocked_by", [])):
            plan.edges.append((_resolve(plan, ref, f"{path}.blocked_by[{j}]"), me))
        for j, ref in enumerate(task.get("blocks", [])):
            target = _resolve(plan, ref, f"{path}.blocks[{j}]")
            if target in plan.existing:
                plan.blocked_existing.setdefault(target, f"{path}.blocks[{j}]")
            plan.edges.append((me, target))
    if "synthesis" in args:
        synthesis = plan.ids[plan.tasks[-1][1]["key"]]
        plan.edges += [(plan.ids[task["key"]], synthesis) for task in args["tasks"]]
    plan.edges = list(dict.fromkeys(plan.edges))  # the same edge twice is one edge
    return plan


def _resolve(plan: _Plan, ref: str, path: str) -> str:
    """A key of this call, else the id of an existing SpecTask (checked later)."""
    if ref in plan.ids:
        return plan.ids[ref]
    try:
        task_id = str(uuid.UUID(ref))
    except ValueError:
        raise ToolError(
            f"invalid arguments: {path}: {ref!r} is neither a key of these tasks nor a task id"
        ) from None
    plan.existing.setdefault(task_id, path)
    return task_id


async def _existing_tasks(
    tx: GraphRepository, project_id: str, plan: _Plan
) -> dict[str, GraphObject]:
    """The existing tasks referenced, locked against change until commit."""
    if not plan.existing:
        return {}
    found = await tx.get_objects(project_id, list(plan.existing), for_share=True)
    for task_id, path in plan.existing.items():
        task = found.get(task_id)
        if task is None or task.type != SPEC_TASK:
            raise ToolError(f"{path}: task {task_id} not found")
    for task_id, path in plan.blocked_existing.items():
        if found[task_id].status != "pending":
            raise ToolError(
                f"{path}: task {task_id} is {found[task_id].status}; only a pending task can "
                "be blocked by new tasks"
            )
    return found


async def _graph_id(
    tx: GraphRepository,
    ctx: ToolContext,
    args: dict[str, Any],
    plan: _Plan,
    existing: dict[str, GraphObject],
) -> str:
    conn = tx.connection
    assert conn is not None
    graph_id: str | None = args.get("graph_id")
    if graph_id is not None:
        try:
            given = await tx.get_object(ctx.project_id, str(parse_id(graph_id, "graph_id")))
        except NotFound:
            given = None
        if given is None or given.type != TASK_GRAPH:
            raise ToolError(f"graph_id: task graph {graph_id} not found")
        graph_id = given.id  # canonical: tasks store it and readers compare it as text
    else:
        graph_id = await graph_of_run(conn, ctx.project_id, ctx.run_id)
    if graph_id is None:
        graphs = {t.properties.get("graph_id") for t in existing.values()}
        if len(graphs) == 1:
            graph_id = graphs.pop()
    for task_id, task in existing.items():
        if task.properties.get("graph_id") != graph_id:
            raise ToolError(
                f"{plan.existing[task_id]}: task {task_id} belongs to another task graph "
                f"than the new tasks ({graph_id or 'none'})"
            )
    if graph_id is None:
        return await _graph_of_calling_run(tx, ctx)
    graph = await tx.get_object(ctx.project_id, graph_id)
    if graph.properties.get("status") == "cancelled":
        raise ToolError(f"task graph {graph_id} is cancelled: no tasks can be added to it")
    return graph_id


async def _graph_of_calling_run(tx: GraphRepository, ctx: ToolContext) -> str:
    """The task graph an earlier call of this run created, else a new one (the caller holds
    the project's DAG lock, so two calls of one run never make two graphs)."""
    conn = tx.connection
    assert conn is not None
    if ctx.run_id:
        found = await conn.fetchval(
            "SELECT id::text FROM kb.graph_objects WHERE project_id = $1 AND type = $2 "
            "AND properties @> jsonb_build_object('created_by_run_id', $3::text) "
            "AND properties ->> 'status' IS DISTINCT FROM 'cancelled' "
            "ORDER BY created_at LIMIT 1",
            ctx.project_id,
            TASK_GRAPH,
            ctx.run_id,
        )
        if found is not None:
            return str(found)
    graph_id = uuid.uuid4()
    await tx.create_objects(
        ctx.project_id,
        [
            NewObject(
                id=graph_id,
                type=TASK_GRAPH,
                properties={
                    "title": f"subtasks of run {ctx.run_id}",
                    "status": "active",
                    "max_parallel": 0,
                    "labels": {"created_by_run_id": ctx.run_id},
                    "created_by_run_id": ctx.run_id,
                },
            )
        ],
    )
    return str(graph_id)


def _task_properties(
    task: dict[str, Any], graph_id: str, run_id: str, allowed: list[str]
) -> dict[str, Any]:
    """What is stored: the arguments' fields (validated by the schema), and what only the
    server sets: the creating run and the agents the task may run with."""
    properties: dict[str, Any] = {
        "key": task["key"],
        "title": task["title"],
        "description": task.get("description", ""),
        "status": "pending",
        "priority": int(task.get("priority", 0)),
        "max_retries": int(task.get("max_retries", DEFAULT_MAX_RETRIES)),
        "retry_count": 0,
        "tags": task.get("tags", []),
        "created_by_run_id": run_id,
        ALLOWED_AGENTS: list(allowed),
    }
    if task.get("assigned_agent"):
        properties["assigned_agent"] = task["assigned_agent"]
    properties["graph_id"] = graph_id
    return properties


SUBTASK_TOOLS = [create_subtasks]
