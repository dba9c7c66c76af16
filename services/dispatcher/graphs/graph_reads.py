"""Reading task graphs back: a graph object with its derived status and its tasks' counts
(``GraphView``), and in full with its tasks in topological order and its edges. Writing them
is ``graph_writes.GraphStore``; the statements are ``store.reads``.

The status is derived from the tasks by one rule, ``kb.task_graph_status`` (migration 0020),
which the database keeps per graph in ``kb.task_graph_states`` as the tasks change; it is
read from there, never derived here. Each read is one snapshot (a read-only repeatable-read
transaction), so a view's status, counts and tasks always agree."""

from __future__ import annotations

import contextlib
import heapq
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import asyncpg

from agentfleet.graph import GraphObject
from agentfleet.graph.task_properties import task_priority
from services.dispatcher.models import Counts, TaskView, iso_now
from services.dispatcher.store.reads import (
    graph_counts,
    graph_edges,
    graph_page,
    graph_stamp,
    graph_tasks,
    graph_with_status,
)

__all__ = ["GraphReader", "GraphView", "topological", "view_of"]


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


def view_of(
    graph: GraphObject, status: str, found: tuple[Counts, str | None, Any] | None
) -> GraphView:
    """The view of ``graph`` whose derived status is ``status``, from its counts."""
    counts, last_complete, last_update = found or (Counts(), None, None)
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


class GraphReader:
    """Reads of task graphs on a pool."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def load(self, project_id: str, graph_id: str, *, with_tasks: bool = True) -> GraphView:
        """The graph with its derived status, and its tasks (topological) and edges."""
        async with self._snapshot() as conn:
            return await _view(conn, project_id, graph_id, with_tasks=with_tasks)

    async def load_if_changed(
        self, project_id: str, graph_id: str, stamp: tuple[Any, ...] | None
    ) -> tuple[tuple[Any, ...], GraphView | None]:
        """The graph's stamp (``store.reads.graph_stamp``) and, if it differs from ``stamp``,
        the full view of the same snapshot (else None): a watch re-reads a large graph only
        when something its watchers would be told about changed."""
        async with self._snapshot() as conn:
            now = await graph_stamp(conn, project_id, graph_id)
            if now == stamp:
                return now, None
            return now, await _view(conn, project_id, graph_id, with_tasks=True)

    async def page(
        self,
        project_id: str,
        statuses: Sequence[str],
        after: tuple[datetime, uuid.UUID],
        limit: int,
    ) -> list[GraphView]:
        """Views (without tasks) of up to ``limit`` graphs of ``statuses`` newest first
        after the keyset position (``store.reads.graph_page``), with one counting statement."""
        async with self._snapshot() as conn:
            graphs = await graph_page(conn, project_id, statuses, after, limit)
            found = await graph_counts(conn, project_id, [g.id for g, _ in graphs])
        return [view_of(g, status, found.get(g.id)) for g, status in graphs]

    @contextlib.asynccontextmanager
    async def _snapshot(self) -> AsyncIterator[asyncpg.Connection]:
        async with (
            self._pool.acquire() as conn,
            conn.transaction(isolation="repeatable_read", readonly=True),
        ):
            yield conn


async def _view(
    conn: asyncpg.Connection, project_id: str, graph_id: str, *, with_tasks: bool
) -> GraphView:
    graph, status = await graph_with_status(conn, project_id, graph_id)
    found = await graph_counts(conn, project_id, [graph.id])
    view = view_of(graph, status, found.get(graph.id))
    if with_tasks:
        view.tasks = topological(await graph_tasks(conn, project_id, graph_id))
        view.edges = await graph_edges(conn, project_id, graph_id)
    return view


def topological(tasks: Sequence[TaskView]) -> list[TaskView]:
    """Tasks in topological order; ties by priority (higher first), then key."""
    by_key = {t.key: t for t in tasks}
    indegree = {t.key: 0 for t in tasks}
    dependents: dict[str, list[str]] = {t.key: [] for t in tasks}
    for task in tasks:
        for blocker in task.blocker_keys:
            if blocker in by_key:
                indegree[task.key] += 1
                dependents[blocker].append(task.key)

    def rank(key: str) -> tuple[int, str]:
        return (-task_priority(by_key[key].object.properties), key)

    ready = [rank(k) for k, d in indegree.items() if d == 0]
    heapq.heapify(ready)
    ordered: list[TaskView] = []
    while ready:
        _, key = heapq.heappop(ready)
        ordered.append(by_key[key])
        for nxt in dependents[key]:
            indegree[nxt] -= 1
            if indegree[nxt] == 0:
                heapq.heappush(ready, rank(nxt))
    seen = {t.key for t in ordered}
    return ordered + sorted((t for t in tasks if t.key not in seen), key=lambda t: t.key)
