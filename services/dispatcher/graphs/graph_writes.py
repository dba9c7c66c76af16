"""Task graphs in the knowledge graph: a TaskGraph object, SpecTask objects and ``blocks``
edges, written in one transaction under the project's DAG lock (the same lock and the same
representation as the toolpool's ``create_subtasks``). Objects and edges are created by the
graph library; the dispatcher's other statements are ``store.task_graphs``. Reading them
back is ``graph_reads``."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import asyncpg

from agentfleet.errors import (
    AlreadyExists,
    FailedPrecondition,
    FieldViolation,
    InvalidArgument,
)
from agentfleet.graph import (
    BLOCKS,
    SPEC_TASK,
    TASK_GRAPH_ADDITION,
    GraphRepository,
    NewObject,
    canonical_id,
    lock_task_dag,
    mark_not_ready,
    notify_tasks_added,
)
from agentfleet.request_ids import check_same_request, request_fingerprint
from services.dispatcher.graphs.dag import NewTask, ValidatedGraph, validate_graph
from services.dispatcher.models import (
    TASK_GRAPH,
    TaskView,
)
from services.dispatcher.store import statistics, task_graphs
from services.dispatcher.store.agents import defined_agents
from services.dispatcher.store.common import notify_ready
from services.dispatcher.store.reads import graph_edges, graph_object, graph_tasks

__all__ = ["GraphStore", "task_properties"]

ADDITION = TASK_GRAPH_ADDITION
"""Marker object of an AddTasks request_id (key ``<graph id>/<request id>``)."""


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
    if task.max_resumes is not None:
        properties["max_resumes"] = task.max_resumes
    if task.extra:
        properties["context"] = task.extra
    return properties


def _task_fields(tasks: Sequence[NewTask]) -> list[dict[str, Any]]:
    """The tasks of a request as it asked for them (checked field by field), for its
    fingerprint."""
    return [asdict(t) for t in tasks]


def _replayed_graph(earlier: task_graphs.EarlierGraph, asked: NewObject) -> str:
    """The earlier graph of the request_id, when this request asked for the same one."""
    check_same_request(earlier.request_fingerprint, asked.properties.get("request_fingerprint"))
    return earlier.graph_id


class GraphStore:
    """Writes of task graphs on a pool."""

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
        llm_triage: bool = False,
    ) -> str | None:
        """Creates the graph; returns its id (``None`` for validate_only). A ``request_id``
        seen before returns that graph, or is :class:`InvalidArgument` naming it when the
        graph was asked for otherwise (validate_only too: it answers as the call would)."""
        graph = validate_graph(tasks, edges)
        graph_id = uuid.uuid4()
        properties: dict[str, Any] = {
            "title": title or f"graph {graph_id}",
            "status": "active",
            "max_parallel": max_parallel,
            "labels": labels,
            "llm_triage": llm_triage,
        }
        if request_id:
            # Beside the request_id (the graph's key), what the request asked.
            properties["request_fingerprint"] = request_fingerprint(
                {
                    "title": title,
                    "tasks": _task_fields(graph.tasks),
                    "edges": graph.edges,
                    "max_parallel": max_parallel,
                    "labels": labels,
                    # Only when asked for: fingerprints of requests before it stay valid.
                    **({"llm_triage": True} if llm_triage else {}),
                }
            )
        graph_object = NewObject(
            id=graph_id, type=TASK_GRAPH, key=request_id or None, properties=properties
        )
        try:
            created = await self._create(project_id, graph, graph_object, validate_only)
        except AlreadyExists:
            # A concurrent call with the same request_id won the key: answer its graph, if
            # this call asked for the same one.
            earlier = await task_graphs.graph_of_request(self._pool, project_id, request_id)
            if earlier is None:
                raise
            return _replayed_graph(earlier, graph_object)
        if created is not None:
            await statistics.refresh_after_write(
                self._pool, max(len(graph.tasks), len(graph.edges))
            )
        return created

    async def _create(
        self,
        project_id: str,
        graph: ValidatedGraph,
        graph_object: NewObject,
        validate_only: bool,
    ) -> str | None:
        """The create_graph transaction; the id of an earlier graph of the same request_id
        (the object's key) if there is one."""
        async with self._pool.acquire() as conn, conn.transaction():
            await self._check_agents(conn, project_id, graph.tasks)
            if graph_object.key:
                earlier = await task_graphs.graph_of_request(conn, project_id, graph_object.key)
                if earlier is not None:
                    replayed = _replayed_graph(earlier, graph_object)
                    return None if validate_only else replayed
            if validate_only:
                return None
            await lock_task_dag(conn, project_id)
            repo = GraphRepository.bound(conn)
            await repo.create_objects(project_id, [graph_object])
            graph_id = graph_object.id
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
            await notify_tasks_added(conn, project_id, str(graph_id))
            await notify_ready(conn, project_id)
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
        """Adds tasks and edges after the same DAG check; returns the new task ids. A
        ``request_id`` seen before for the graph returns the ids it added, or is
        :class:`InvalidArgument` naming it when it added something else."""
        # Tasks store the graph id as text and every reader compares it as text.
        graph_id = canonical_id(graph_id, "task_graph_id")
        async with self._pool.acquire() as conn, conn.transaction():
            await lock_task_dag(conn, project_id)
            graph = await graph_object(conn, project_id, graph_id, for_update=True)
            marker_key = f"{graph_id}/{request_id}" if request_id else None
            fingerprint = request_fingerprint(
                {"tasks": _task_fields(tasks), "edges": [list(e) for e in edges]}
            )
            if marker_key is not None:
                # Under the project's DAG lock: a concurrent repeat waits for the first
                # one's marker and is compared with it.
                earlier = await task_graphs.addition_of_request(conn, project_id, marker_key)
                if earlier is not None:
                    check_same_request(earlier.request_fingerprint, fingerprint)
                    return earlier.task_ids
            # After the replay: a client retrying an addition that succeeded gets its answer
            # even if the graph was cancelled since (AIP-155).
            if graph.properties.get("status") == "cancelled":
                raise FailedPrecondition(f"task graph {graph_id} is cancelled")
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
                await mark_not_ready(conn, project_id, newly_blocked)
            if marker_key is not None:
                await repo.create_objects(
                    project_id,
                    [
                        NewObject(
                            type=ADDITION,
                            key=marker_key,
                            properties={
                                "task_ids": list(ids.values()),
                                "request_fingerprint": fingerprint,
                            },
                        )
                    ],
                )
            await notify_tasks_added(conn, project_id, graph_id)
            await notify_ready(conn, project_id)
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
        problems = [
            FieldViolation(
                "edges",
                f"task {key!r} is {status}; only a pending task can be blocked by a new edge",
            )
            for key, status in await task_graphs.lock_task_states(conn, project_id, targets)
            if status != "pending"
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
        known = await defined_agents(conn, project_id, wanted)
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
