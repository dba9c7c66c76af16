"""Reads of task graphs shared by the store, the loop and the watch: tasks with their
blocker facts, edges, counts. Every statement is scoped by project_id."""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Any

import asyncpg

from agentfleet.graph import BLOCKS, SPEC_TASK, GraphObject
from agentfleet.graph.task_properties import task_priority
from services.dispatcher.models import Counts, TaskView

__all__ = [
    "CHANGES_CHANNEL",
    "READY_CHANNEL",
    "graph_counts",
    "graph_edges",
    "graph_tasks",
    "notify_changes",
    "topological",
]

CHANGES_CHANNEL = "agentfleet_task_changes"
"""NOTIFY channel (payload: graph id) at commit of every task change (watchers)."""
READY_CHANNEL = "agentfleet_tasks_ready"
"""NOTIFY channel (payload: project id) when tasks may have become available (dispatchers)."""

T_COLUMNS = (
    "t.id, t.project_id, t.type, t.key, t.properties, t.status, t.version, t.created_at, "
    "t.updated_at"
)
# "Some blocker is not completed" and "some blocker is a dead end", for the task aliased t.
UNFINISHED_BLOCKER = f"""
    EXISTS (SELECT 1 FROM kb.graph_relationships r JOIN kb.graph_objects b ON b.id = r.src_id
            WHERE r.project_id = t.project_id AND r.dst_id = t.id AND r.type = '{BLOCKS}'
              AND b.status IS DISTINCT FROM 'completed')"""
DEAD_BLOCKER = f"""
    EXISTS (SELECT 1 FROM kb.graph_relationships r JOIN kb.graph_objects b ON b.id = r.src_id
            WHERE r.project_id = t.project_id AND r.dst_id = t.id AND r.type = '{BLOCKS}'
              AND b.status IN ('failed', 'paused', 'cancelled'))"""


async def graph_tasks(
    conn: asyncpg.Connection | asyncpg.Pool, project_id: str, graph_id: str
) -> list[TaskView]:
    """Every task of the graph with its blocker keys and whether it is blocked."""
    rows = await conn.fetch(
        f"""
        SELECT {T_COLUMNS},
          coalesce((SELECT array_agg(b.properties ->> 'key' ORDER BY b.properties ->> 'key')
                    FROM kb.graph_relationships r JOIN kb.graph_objects b ON b.id = r.src_id
                    WHERE r.project_id = t.project_id AND r.dst_id = t.id
                      AND r.type = '{BLOCKS}'), '{{}}') AS blocker_keys,
          (t.status = 'pending' AND {DEAD_BLOCKER}) AS blocked
        FROM kb.graph_objects t
        WHERE t.project_id = $1 AND t.type = '{SPEC_TASK}' AND t.properties ->> 'graph_id' = $2
        """,
        project_id,
        graph_id,
    )
    return [
        TaskView(
            object=GraphObject.from_row(row),
            blocker_keys=list(row["blocker_keys"]),
            blocked=bool(row["blocked"]),
        )
        for row in rows
    ]


async def graph_edges(
    conn: asyncpg.Connection | asyncpg.Pool, project_id: str, graph_id: str
) -> list[tuple[str, str]]:
    """The graph's ``blocks`` edges as (blocker key, blocked key)."""
    rows = await conn.fetch(
        f"""
        SELECT s.properties ->> 'key' AS blocker, d.properties ->> 'key' AS blocked
        FROM kb.graph_objects d
        JOIN kb.graph_relationships r
          ON r.project_id = d.project_id AND r.dst_id = d.id AND r.type = '{BLOCKS}'
        JOIN kb.graph_objects s ON s.id = r.src_id
        WHERE d.project_id = $1 AND d.type = '{SPEC_TASK}' AND d.properties ->> 'graph_id' = $2
        ORDER BY 1, 2
        """,
        project_id,
        graph_id,
    )
    return [(row["blocker"], row["blocked"]) for row in rows]


async def graph_counts(
    conn: asyncpg.Connection | asyncpg.Pool, project_id: str, graph_ids: Sequence[str]
) -> dict[str, tuple[Counts, str | None, Any]]:
    """Per graph: counts, the latest task complete_time (ISO) and the latest task change."""
    rows = await conn.fetch(
        f"""
        SELECT t.properties ->> 'graph_id' AS graph_id, t.status, count(*) AS n,
               count(*) FILTER (WHERE t.status = 'pending' AND {DEAD_BLOCKER}) AS blocked,
               count(*) FILTER (WHERE t.status = 'pending' AND NOT {UNFINISHED_BLOCKER})
                 AS available,
               max(t.properties ->> 'complete_time') AS last_complete,
               max(t.updated_at) AS last_update
        FROM kb.graph_objects t
        WHERE t.project_id = $1 AND t.type = '{SPEC_TASK}'
          AND t.properties ->> 'graph_id' = ANY($2::text[])
        GROUP BY 1, 2
        """,
        project_id,
        list(graph_ids),
    )
    out: dict[str, tuple[Counts, str | None, Any]] = {}
    for row in rows:
        counts, last_complete, last_update = out.get(row["graph_id"], (Counts(), None, None))
        counts.by_status[row["status"]] = row["n"]
        counts.blocked += row["blocked"]
        counts.available += row["available"]
        last_complete = max(filter(None, [last_complete, row["last_complete"]]), default=None)
        last_update = max(filter(None, [last_update, row["last_update"]]), default=None)
        out[row["graph_id"]] = (counts, last_complete, last_update)
    return out


async def notify_changes(conn: asyncpg.Connection, graph_ids: Sequence[str]) -> None:
    """Wakes watchers of the graphs (delivered at commit)."""
    for graph_id in dict.fromkeys(graph_ids):
        await conn.execute("SELECT pg_notify($1, $2)", CHANGES_CHANNEL, graph_id)


async def notify_ready(conn: asyncpg.Connection, project_id: str) -> None:
    """Wakes dispatchers: tasks of the project may have become available."""
    await conn.execute("SELECT pg_notify($1, $2)", READY_CHANNEL, project_id)


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
