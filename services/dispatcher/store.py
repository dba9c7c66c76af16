"""Task graphs in the knowledge graph: a TaskGraph object, SpecTask objects and ``blocks``
edges, written in one transaction under the project's DAG lock (the same lock and the same
representation as the toolpool's ``create_subtasks``)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from agentfleet.errors import (
    AlreadyExists,
    FailedPrecondition,
    FieldViolation,
    InvalidArgument,
    NotFound,
)
from agentfleet.graph import (
    BLOCKS,
    SPEC_TASK,
    TASK_GRAPH_ADDITION,
    GraphObject,
    GraphRepository,
    NewObject,
    lock_task_dag,
    notify_tasks_added,
    parse_id,
)
from services.dispatcher import statistics
from services.dispatcher.dag import NewTask, validate_graph
from services.dispatcher.models import (
    TASK_GRAPH,
    Counts,
    TaskView,
    graph_status,
    iso_now,
)
from services.dispatcher.queries import (
    graph_counts,
    graph_edges,
    graph_tasks,
    notify_changes,
    notify_ready,
    topological,
)

__all__ = ["GraphStore", "GraphView", "task_properties"]

ADDITION = TASK_GRAPH_ADDITION
"""Marker object of an AddTasks request_id (key ``<graph id>/<request id>``)."""


@dataclass(kw_only=True, slots=True)
class GraphView:
    """A graph with its derived status; tasks and edges when loaded in full."""

    object: GraphObject
    counts: Counts
    status: str
    tasks: list[TaskView] = field(default_factory=list)
    edges: list[tuple[str, str]] = field(default_factory=list)
    complete_time: str | None = None
    update_time: Any = None


def task_properties(task: NewTask, graph_id: str, *, ready: bool) -> dict[str, Any]:
    """SpecTask properties (as ``create_subtasks`` writes them, plus dispatcher fields)."""
    properties: dict[str, Any] = {
        "key": task.key,
        "title": task.title,
        "description": task.description,
        "status": "pending",
        "priority": task.priority,
        "max_retries": task.max_retries,
        "retry_count": 0,
        "tags": list(task.tags),
        "graph_id": graph_id,
        "ready": ready,
        "attempts": 0,
    }
    if task.assigned_agent:
        properties["assigned_agent"] = task.assigned_agent
    if task.timeout_s is not None:
        properties["timeout_s"] = task.timeout_s
    if task.extra:
        properties["context"] = task.extra
    return properties


class GraphStore:
    """Writes and reads of task graphs on a pool."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def create_graph(
        self,
        project_id: str,
        *,
        title: str,
        tasks: Sequence[NewTask],
        edges: Sequence[tuple[str, str]],
        max_parallel: int,
        labels: dict[str, str],
        request_id: str,
        validate_only: bool,
    ) -> str | None:
        """Creates the graph; returns its id (``None`` for validate_only)."""
        graph = validate_graph(tasks, edges)
        try:
            graph_id = await self._create(
                project_id,
                graph.tasks,
                graph.edges,
                title=title,
                max_parallel=max_parallel,
                labels=labels,
                request_id=request_id,
                validate_only=validate_only,
            )
        except AlreadyExists:
            # A concurrent call with the same request_id won the key: answer its graph.
            earlier = await self._pool.fetchval(
                "SELECT id FROM kb.graph_objects WHERE project_id = $1 AND type = $2 AND key = $3",
                project_id,
                TASK_GRAPH,
                request_id,
            )
            if earlier is None:
                raise
            return str(earlier)
        if graph_id is not None:
            await statistics.refresh_after_write(
                self._pool, max(len(graph.tasks), len(graph.edges))
            )
        return graph_id

    async def _create(
        self,
        project_id: str,
        tasks: Sequence[NewTask],
        edges: Sequence[tuple[str, str]],
        *,
        title: str,
        max_parallel: int,
        labels: dict[str, str],
        request_id: str,
        validate_only: bool,
    ) -> str | None:
        graph = validate_graph(tasks, edges)
        async with self._pool.acquire() as conn, conn.transaction():
            await self._check_agents(conn, project_id, graph.tasks)
            if validate_only:
                return None
            if request_id:
                earlier = await conn.fetchval(
                    "SELECT id FROM kb.graph_objects WHERE project_id = $1 AND type = $2 "
                    "AND key = $3",
                    project_id,
                    TASK_GRAPH,
                    request_id,
                )
                if earlier is not None:
                    return str(earlier)
            await lock_task_dag(conn, project_id)
            repo = GraphRepository.bound(conn)
            graph_id = uuid.uuid4()
            await repo.create_objects(
                project_id,
                [
                    NewObject(
                        id=graph_id,
                        type=TASK_GRAPH,
                        key=request_id or None,
                        properties={
                            "title": title or f"graph {graph_id}",
                            "status": "active",
                            "max_parallel": max_parallel,
                            "labels": labels,
                        },
                    )
                ],
            )
            blocked = {dst for _, dst in graph.edges}
            ids = {t.key: uuid.uuid4() for t in graph.tasks}
            await repo.create_objects(
                project_id,
                [
                    NewObject(
                        id=ids[t.key],
                        type=SPEC_TASK,
                        properties=task_properties(t, str(graph_id), ready=t.key not in blocked),
                    )
                    for t in graph.tasks
                ],
            )
            await repo.create_relationships(
                project_id, [(BLOCKS, ids[s], ids[d]) for s, d in graph.edges]
            )
            await notify_tasks_added(conn, project_id)
            await notify_ready(conn, project_id)
            await notify_changes(conn, [str(graph_id)])
        return str(graph_id)

    async def add_tasks(
        self,
        project_id: str,
        graph_id: str,
        *,
        tasks: Sequence[NewTask],
        edges: Sequence[tuple[str, str]],
        request_id: str,
    ) -> list[str]:
        """Adds tasks and edges after the same DAG check; returns the new task ids."""
        parse_id(graph_id, "task_graph_id")
        async with self._pool.acquire() as conn, conn.transaction():
            await lock_task_dag(conn, project_id)
            graph = await self._graph_object(conn, project_id, graph_id, for_update=True)
            if graph.properties.get("status") == "cancelled":
                raise FailedPrecondition(f"task graph {graph_id} is cancelled")
            marker_key = f"{graph_id}/{request_id}" if request_id else None
            if marker_key is not None:
                earlier = await conn.fetchval(
                    "SELECT properties -> 'task_ids' FROM kb.graph_objects "
                    "WHERE project_id = $1 AND type = $2 AND key = $3",
                    project_id,
                    ADDITION,
                    marker_key,
                )
                if earlier is not None:
                    return list(earlier)
            existing = {t.key: t for t in await graph_tasks(conn, project_id, graph_id)}
            validated = validate_graph(
                tasks,
                edges,
                existing_keys=set(existing),
                existing_edges=await graph_edges(conn, project_id, graph_id),
            )
            await self._check_agents(conn, project_id, validated.tasks)
            newly_blocked = await self._lock_blocked_existing(
                conn, project_id, validated.edges, existing
            )
            ids = {t.key: str(uuid.uuid4()) for t in validated.tasks}
            key_to_id = {**{k: v.object.id for k, v in existing.items()}, **ids}
            unfinished = {
                dst
                for src, dst in validated.edges
                if src in ids or existing[src].object.status != "completed"
            }
            repo = GraphRepository.bound(conn)
            await repo.create_objects(
                project_id,
                [
                    NewObject(
                        id=uuid.UUID(ids[t.key]),
                        type=SPEC_TASK,
                        properties=task_properties(t, graph_id, ready=t.key not in unfinished),
                    )
                    for t in validated.tasks
                ],
            )
            await repo.create_relationships(
                project_id, [(BLOCKS, key_to_id[s], key_to_id[d]) for s, d in validated.edges]
            )
            if newly_blocked:
                await conn.execute(
                    """
                    UPDATE kb.graph_objects
                    SET properties = properties || '{"ready": false}', version = version + 1,
                        updated_at = now()
                    WHERE project_id = $1 AND id = ANY($2::uuid[])
                    """,
                    project_id,
                    [uuid.UUID(i) for i in newly_blocked],
                )
            if marker_key is not None:
                await repo.create_objects(
                    project_id,
                    [
                        NewObject(
                            type=ADDITION,
                            key=marker_key,
                            properties={"task_ids": list(ids.values())},
                        )
                    ],
                )
            await notify_tasks_added(conn, project_id)
            await notify_ready(conn, project_id)
            await notify_changes(conn, [graph_id])
        await statistics.refresh_after_write(
            self._pool, max(len(validated.tasks), len(validated.edges))
        )
        return list(ids.values())

    async def _lock_blocked_existing(
        self,
        conn: asyncpg.Connection,
        project_id: str,
        edges: Sequence[tuple[str, str]],
        existing: dict[str, TaskView],
    ) -> list[str]:
        """Existing tasks new edges block: locked, and they must still be pending."""
        targets = sorted({existing[d].object.id for _, d in edges if d in existing})
        if not targets:
            return []
        rows = await conn.fetch(
            "SELECT id, status, properties ->> 'key' AS key FROM kb.graph_objects "
            "WHERE project_id = $1 AND id = ANY($2::uuid[]) ORDER BY id FOR UPDATE",
            project_id,
            [uuid.UUID(t) for t in targets],
        )
        problems = [
            FieldViolation(
                "edges",
                f"task {row['key']!r} is {row['status']}; only a pending task can be "
                "blocked by a new edge",
            )
            for row in rows
            if row["status"] != "pending"
        ]
        if problems:
            raise InvalidArgument.for_fields(problems)
        return targets

    async def _check_agents(
        self, conn: asyncpg.Connection, project_id: str, tasks: Sequence[NewTask]
    ) -> None:
        wanted = sorted({t.assigned_agent for t in tasks if t.assigned_agent})
        if not wanted:
            return
        rows = await conn.fetch(
            "SELECT name FROM kb.agent_definitions WHERE project_id = $1 AND name = ANY($2)",
            project_id,
            wanted,
        )
        known = {row["name"] for row in rows}
        problems = [
            FieldViolation(
                f"tasks[{i}].assigned_agent",
                f"agent {t.assigned_agent!r} is not defined in project {project_id}",
            )
            for i, t in enumerate(tasks)
            if t.assigned_agent and t.assigned_agent not in known
        ]
        if problems:
            raise InvalidArgument.for_fields(problems)

    async def _graph_object(
        self,
        conn: asyncpg.Connection | asyncpg.Pool,
        project_id: str,
        graph_id: str,
        *,
        for_update: bool = False,
    ) -> GraphObject:
        lock = "FOR UPDATE" if for_update else ""
        row = await conn.fetchrow(
            "SELECT id, project_id, type, key, properties, status, version, created_at, "
            f"updated_at FROM kb.graph_objects WHERE project_id = $1 AND id = $2 AND type = $3 "
            f"{lock}",
            project_id,
            parse_id(graph_id, "task_graph_id"),
            TASK_GRAPH,
        )
        if row is None:
            raise NotFound(f"task graph {graph_id} not found in project {project_id}")
        return GraphObject.from_row(row)

    async def load(self, project_id: str, graph_id: str, *, with_tasks: bool = True) -> GraphView:
        """The graph with its derived status, and its tasks (topological) and edges."""
        graph = await self._graph_object(self._pool, project_id, graph_id)
        view = await self._view(project_id, graph)
        if with_tasks:
            view.tasks = topological(await graph_tasks(self._pool, project_id, graph_id))
            view.edges = await graph_edges(self._pool, project_id, graph_id)
        return view

    async def _view(self, project_id: str, graph: GraphObject) -> GraphView:
        found = await graph_counts(self._pool, project_id, [graph.id])
        return view_of(graph, found.get(graph.id))

    async def views(self, project_id: str, graphs: Sequence[GraphObject]) -> list[GraphView]:
        """Views (without tasks) of several graphs, with one counting statement."""
        found = await graph_counts(self._pool, project_id, [g.id for g in graphs])
        return [view_of(g, found.get(g.id)) for g in graphs]

    async def task(self, project_id: str, task_id: str) -> TaskView:
        """One SpecTask with its blocker facts; NotFound if it is not a task of the project."""
        row = await self._pool.fetchrow(
            "SELECT properties ->> 'graph_id' AS graph_id FROM kb.graph_objects "
            "WHERE project_id = $1 AND id = $2 AND type = $3",
            project_id,
            parse_id(task_id, "task_id"),
            SPEC_TASK,
        )
        if row is None:
            raise NotFound(f"task {task_id} not found in project {project_id}")
        for view in await graph_tasks(self._pool, project_id, row["graph_id"] or ""):
            if view.object.id == str(task_id):
                return view
        raise NotFound(f"task {task_id} belongs to no task graph")


def view_of(graph: GraphObject, found: tuple[Counts, str | None, Any] | None) -> GraphView:
    counts, last_complete, last_update = found or (Counts(), None, None)
    cancelled = graph.properties.get("status") == "cancelled"
    status = graph_status(cancelled, counts)
    complete_time = None
    if status == "cancelled":
        complete_time = graph.properties.get("cancel_time") or iso_now()
    elif status != "active":
        complete_time = last_complete
    update_time = max(filter(None, [graph.updated_at, last_update]))
    return GraphView(
        object=graph,
        counts=counts,
        status=status,
        complete_time=complete_time,
        update_time=update_time,
    )
