"""Reading task graphs back: a graph object with its status derived from its tasks' counts
(``GraphView``), and in full with its tasks in topological order and its edges. Writing them
is ``store.GraphStore``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from agentfleet.errors import NotFound
from agentfleet.graph import GraphObject, parse_id
from services.dispatcher.models import TASK_GRAPH, Counts, TaskView, graph_status, iso_now
from services.dispatcher.queries import graph_counts, graph_edges, graph_tasks, topological

__all__ = ["GraphReader", "GraphView", "graph_object", "view_of"]


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


async def graph_object(
    conn: asyncpg.Connection | asyncpg.Pool,
    project_id: str,
    graph_id: str,
    *,
    for_update: bool = False,
) -> GraphObject:
    """The TaskGraph object; NotFound when the project has no such graph."""
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


class GraphReader:
    """Reads of task graphs on a pool."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def load(self, project_id: str, graph_id: str, *, with_tasks: bool = True) -> GraphView:
        """The graph with its derived status, and its tasks (topological) and edges."""
        graph = await graph_object(self._pool, project_id, graph_id)
        found = await graph_counts(self._pool, project_id, [graph.id])
        view = view_of(graph, found.get(graph.id))
        if with_tasks:
            view.tasks = topological(await graph_tasks(self._pool, project_id, graph_id))
            view.edges = await graph_edges(self._pool, project_id, graph_id)
        return view

    async def views(self, project_id: str, graphs: Sequence[GraphObject]) -> list[GraphView]:
        """Views (without tasks) of several graphs, with one counting statement."""
        found = await graph_counts(self._pool, project_id, [g.id for g in graphs])
        return [view_of(g, found.get(g.id)) for g in graphs]
