"""Reads of task graphs, their tasks and sessions for the API, the loop and the watch: tasks
with their blocker facts, edges, counts, and the keyset pages of the listings. Every
statement is scoped by project_id."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import asyncpg

from agentfleet.errors import NotFound
from agentfleet.graph import BLOCKS, HAS_SESSION, SPEC_TASK, GraphObject, parse_id
from agentfleet.graph.task_properties import sql_int, sql_uuid
from services.dispatcher.models import TASK_GRAPH, Counts, TaskView
from services.dispatcher.store.common import DEAD_BLOCKER, T_COLUMNS, UNFINISHED_BLOCKER

__all__ = [
    "FIRST_SESSION",
    "LAST_GRAPH",
    "graph_counts",
    "graph_edges",
    "graph_object",
    "graph_page",
    "graph_stamp",
    "graph_tasks",
    "graph_with_status",
    "running_runs",
    "session_page",
    "task_exists",
]

_ATTEMPT = "coalesce({}, 0)".format(sql_int("t.properties -> 'attempt'", 0, 2**31 - 1))
"""A session's attempt number (0 when a stored value is malformed: never a failed read)."""


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
        f"SELECT {T_COLUMNS} FROM kb.graph_objects t "
        f"WHERE t.project_id = $1 AND t.id = $2 AND t.type = $3 {lock}",
        project_id,
        parse_id(graph_id, "task_graph_id"),
        TASK_GRAPH,
    )
    if row is None:
        raise NotFound(f"task graph {graph_id} not found in project {project_id}")
    return GraphObject.from_row(row)


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


# A page of ListTaskGraphs: the project's graphs of the given statuses newest first, after
# the keyset position (created_at, id) $3, $4; $5 rows. Each status is one backward range of
# task_graph_states_page_idx cut at the position and at the page size (the LATERAL), so the
# statement reads at most $5 index entries per status and $5 graphs, however many graphs
# the project has and however few match. The position is never NULL (the first page starts
# after LAST_GRAPH): an "IS NULL OR" would make a generic plan filter instead of seek.
_GRAPH_PAGE = f"""
    SELECT {T_COLUMNS}, s.status AS graph_status
    FROM unnest($2::text[]) AS f (status)
    CROSS JOIN LATERAL (
        SELECT s.graph_id, s.status, s.created_at FROM kb.task_graph_states s
        WHERE s.project_id = $1 AND s.status = f.status
          AND (s.created_at, s.graph_id) < ($3::timestamptz, $4::uuid)
        ORDER BY s.created_at DESC, s.graph_id DESC
        LIMIT $5
    ) s
    JOIN kb.graph_objects t ON t.id = s.graph_id AND t.project_id = $1
    ORDER BY s.created_at DESC, s.graph_id DESC
    LIMIT $5
    """
LAST_GRAPH = (datetime.max.replace(tzinfo=UTC), uuid.UUID(int=2**128 - 1))
"""The keyset position of ListTaskGraphs' first page: after every graph (newest first)."""


async def graph_page(
    conn: asyncpg.Connection | asyncpg.Pool,
    project_id: str,
    statuses: Sequence[str],
    after: tuple[datetime, uuid.UUID],
    limit: int,
) -> list[tuple[GraphObject, str]]:
    """The project's task graphs of ``statuses`` (the derived status, as kept in
    kb.task_graph_states) newest first, after the keyset position; each with its status."""
    rows = await _keyset_page(
        conn, _GRAPH_PAGE, project_id, list(statuses), after=after, limit=limit
    )
    return [(GraphObject.from_row(r), r["graph_status"]) for r in rows]


async def graph_with_status(
    conn: asyncpg.Connection | asyncpg.Pool, project_id: str, graph_id: str
) -> tuple[GraphObject, str]:
    """The TaskGraph object and its derived status; NotFound when the project has none."""
    row = await conn.fetchrow(
        f"""
        SELECT {T_COLUMNS}, s.status AS graph_status
        FROM kb.graph_objects t JOIN kb.task_graph_states s ON s.graph_id = t.id
        WHERE t.project_id = $1 AND t.id = $2 AND t.type = '{TASK_GRAPH}'
        """,
        project_id,
        parse_id(graph_id, "task_graph_id"),
    )
    if row is None:
        raise NotFound(f"task graph {graph_id} not found in project {project_id}")
    return GraphObject.from_row(row), row["graph_status"]


async def graph_stamp(
    conn: asyncpg.Connection | asyncpg.Pool, project_id: str, graph_id: str
) -> tuple[Any, ...]:
    """What a watcher's events depend on, in one row: the derived status, the graph's version
    and, over its tasks, their number, a digest of every (id, version) and the latest
    change. Equal stamps mean no task was added or changed and the status is the same, so
    a re-read would yield no event; one index range (graph_objects_spectask_graph_idx), no
    properties decoded or sent. NotFound when the project has no such graph."""
    row = await conn.fetchrow(
        f"""
        SELECT s.status, g.version, g.updated_at, t.n, t.digest, t.last_update
        FROM kb.graph_objects g JOIN kb.task_graph_states s ON s.graph_id = g.id
        CROSS JOIN LATERAL (
            SELECT count(*) AS n,
                   coalesce(sum(hashtextextended(x.id::text, x.version)), 0) AS digest,
                   max(x.updated_at) AS last_update
            FROM kb.graph_objects x
            WHERE x.project_id = $1 AND x.type = '{SPEC_TASK}'
              AND x.properties ->> 'graph_id' = $3
        ) t
        WHERE g.project_id = $1 AND g.id = $2 AND g.type = '{TASK_GRAPH}'
        """,
        project_id,
        parse_id(graph_id, "task_graph_id"),
        graph_id,
    )
    if row is None:
        raise NotFound(f"task graph {graph_id} not found in project {project_id}")
    return tuple(row)


async def running_runs(pool: asyncpg.Pool, project_id: str, graph_id: str) -> list[str]:
    """The run ids of the graph's in-progress tasks' sessions (those that have one)."""
    rows = await pool.fetch(
        f"""
        SELECT s.properties ->> 'run_id' AS run_id
        FROM kb.graph_objects t
        JOIN kb.graph_objects s
          ON s.project_id = t.project_id AND s.id = {sql_uuid("t.properties ->> 'session_id'")}
        WHERE t.project_id = $1 AND t.type = '{SPEC_TASK}' AND t.status = 'in_progress'
          AND t.properties ->> 'graph_id' = $2 AND s.properties ? 'run_id'
        """,
        project_id,
        graph_id,
    )
    return [row["run_id"] for row in rows]


async def task_exists(pool: asyncpg.Pool, project_id: str, task_id: uuid.UUID) -> bool:
    """Whether the project has the SpecTask."""
    found = await pool.fetchval(
        f"SELECT 1 FROM kb.graph_objects WHERE project_id = $1 AND id = $2 "
        f"AND type = '{SPEC_TASK}'",
        project_id,
        task_id,
    )
    return found is not None


_SESSION_PAGE = f"""
    SELECT {T_COLUMNS} FROM kb.graph_relationships r
    JOIN kb.graph_objects t ON t.id = r.dst_id
    WHERE r.project_id = $1 AND r.src_id = $2 AND r.type = '{HAS_SESSION}'
      AND ({_ATTEMPT}, t.id) > ($3::int, $4::uuid)
    ORDER BY {_ATTEMPT}, t.id
    LIMIT $5
    """
FIRST_SESSION = (-1, uuid.UUID(int=0))
"""The keyset position of ListTaskSessions' first page: before every session (attempt >= 0)."""


async def session_page(
    pool: asyncpg.Pool,
    project_id: str,
    task_id: uuid.UUID,
    after: tuple[int, uuid.UUID],
    limit: int,
) -> list[GraphObject]:
    """The task's sessions by attempt, after the keyset position (attempt, id)."""
    rows = await _keyset_page(pool, _SESSION_PAGE, project_id, task_id, after=after, limit=limit)
    return [GraphObject.from_row(r) for r in rows]


async def _keyset_page(
    conn: asyncpg.Connection | asyncpg.Pool,
    statement: str,
    *args: object,
    after: tuple[object, uuid.UUID],
    limit: int,
) -> list[asyncpg.Record]:
    """The rows of a keyset-page ``statement`` whose parameters are ``args``, then the two
    values of the position to read after, then the page size."""
    return list(await conn.fetch(statement, *args, *after, limit))
