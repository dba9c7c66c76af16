"""SpecTask DAG helpers shared by ``create_subtasks`` and the dispatcher.

Each runs on a connection inside the caller's transaction. Whoever adds ``blocks`` edges
takes :func:`lock_task_dag` first, reads the edges reachable from the tasks it links with
:func:`blocks_edges`, and checks the union with :func:`agentfleet.graph.dag.find_cycle`:
two concurrent writers can then never close a cycle between them.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import asyncpg

from agentfleet.errors import InvalidArgument
from agentfleet.graph._common import parse_id
from agentfleet.graph.dag import find_cycle
from agentfleet.graph.reserved import BLOCKS, SPEC_TASK
from agentfleet.postgres import db

TASKS_ADDED_CHANNEL = "agentfleet_tasks_added"
"""NOTIFY channel (payload: project id) sent at commit when tasks were added (dispatchers)."""
TASK_CHANGES_CHANNEL = "agentfleet_task_changes"
"""NOTIFY channel (payload: graph id) sent at commit of every change of a graph's tasks
(WatchTaskGraph streams: they re-read only the graph named)."""

MAX_TASKS_PER_GRAPH = 10_000
"""The most SpecTasks one task graph holds, whoever adds them (CreateTaskGraph, AddTasks,
``create_subtasks``): the graph's views and the status rule read all of them."""


def graph_size_problem(existing: int, adding: int) -> str | None:
    """Why a graph of ``existing`` tasks may not take ``adding`` more, else ``None``. The
    one check of :data:`MAX_TASKS_PER_GRAPH`; callers count under the project's DAG lock,
    so concurrent writers cannot pass it together."""
    if existing + adding > MAX_TASKS_PER_GRAPH:
        return f"a graph holds at most {MAX_TASKS_PER_GRAPH} tasks"
    return None


async def graph_task_count(conn: asyncpg.Connection, project_id: str, graph_id: str) -> int:
    """How many SpecTasks the graph has (``graph_id`` canonical, as tasks store it)."""
    count = await conn.fetchval(
        """
        SELECT count(*) FROM kb.graph_objects
        WHERE project_id = $1 AND type = $2
          AND properties @> jsonb_build_object('graph_id', $3::text)
        """,
        project_id,
        SPEC_TASK,
        graph_id,
    )
    return int(count)


async def lock_task_dag(conn: asyncpg.Connection, project_id: str) -> None:
    """Serialises writers of ``blocks`` edges of one project until the transaction ends."""
    await db.lock_key(conn, f"agentfleet.blocks:{project_id}")


async def blocks_edges(
    conn: asyncpg.Connection, project_id: str, task_ids: Sequence[str | uuid.UUID]
) -> list[tuple[str, str]]:
    """Every ``blocks`` edge reachable downstream of ``task_ids``, as (blocker, blocked).

    A new edge ``x -> t`` closes a cycle exactly when ``x`` is reachable from ``t``, so the
    edges downstream of the tasks new edges point at are all a cycle check needs. One
    recursive statement; UNION keeps it finite on a graph that already has a cycle.
    """
    rows = await conn.fetch(
        """
        WITH RECURSIVE reach (src_id, dst_id) AS (
            SELECT r.src_id, r.dst_id FROM kb.graph_relationships r
            WHERE r.project_id = $1 AND r.type = $3 AND r.src_id = ANY($2::uuid[])
            UNION
            SELECT r.src_id, r.dst_id FROM kb.graph_relationships r
            JOIN reach ON r.src_id = reach.dst_id
            WHERE r.project_id = $1 AND r.type = $3
        )
        SELECT src_id, dst_id FROM reach
        """,
        project_id,
        [parse_id(t, "task_ids") for t in task_ids],
        BLOCKS,
    )
    return [(str(row["src_id"]), str(row["dst_id"])) for row in rows]


async def cycle_with_new_edges(
    conn: asyncpg.Connection, project_id: str, new_edges: Sequence[tuple[str, str]]
) -> list[str] | None:
    """The cycle that adding ``new_edges`` (blocker, blocked ids) would close, or ``None``.

    Ids of tasks not stored yet are fine: they have no stored edges. Call it after
    :func:`lock_task_dag` and write the edges in the same transaction.
    """
    targets = sorted({dst for _, dst in new_edges})
    stored = await blocks_edges(conn, project_id, targets) if targets else []
    return find_cycle([], [*stored, *((str(s), str(d)) for s, d in new_edges)])


async def mark_not_ready(
    conn: asyncpg.Connection, project_id: str, task_ids: Sequence[str]
) -> None:
    """Clears the ``ready`` hint of existing tasks a new edge blocks (the claim's index).

    Also what stops a claim already under way from starting them: its snapshot predates the
    edge, and locking a task re-checks only the task's own row, whose hint is now false."""
    await conn.execute(
        """
        UPDATE kb.graph_objects
        SET properties = properties || '{"ready": false}', version = version + 1,
            updated_at = now()
        WHERE project_id = $1 AND id = ANY($2::uuid[])
        """,
        project_id,
        [parse_id(i, "task_ids") for i in task_ids],
    )


async def graph_of_run(conn: asyncpg.Connection, project_id: str, run_id: str) -> str | None:
    """The task graph id of the SpecTask a run works on (dispatched runs); else ``None``."""
    try:
        run = parse_id(run_id, "run_id")
    except InvalidArgument:
        return None  # not a stored run (e.g. a direct call in tests): no task, no graph
    return await conn.fetchval(
        """
        SELECT t.properties ->> 'graph_id'
        FROM kb.agent_runs r
        JOIN kb.graph_objects t ON t.project_id = r.project_id AND t.id = r.task_id
        WHERE r.project_id = $1 AND r.id = $2
        """,
        project_id,
        run,
    )


async def task_keys_taken(
    conn: asyncpg.Connection, project_id: str, graph_id: str, keys: Sequence[str]
) -> list[str]:
    """Which of ``keys`` SpecTasks of the graph already use (keys are unique per graph)."""
    rows = await conn.fetch(
        """
        SELECT DISTINCT properties ->> 'key' AS key FROM kb.graph_objects
        WHERE project_id = $1 AND type = $2
          AND properties @> jsonb_build_object('graph_id', $3::text)
          AND properties ->> 'key' = ANY($4::text[])
        ORDER BY key
        """,
        project_id,
        SPEC_TASK,
        graph_id,
        list(keys),
    )
    return [row["key"] for row in rows]


async def notify_task_changes(conn: asyncpg.Connection, graph_ids: Sequence[str]) -> None:
    """Wakes watchers of the graphs (delivered at commit)."""
    for graph_id in dict.fromkeys(graph_ids):
        await conn.execute("SELECT pg_notify($1, $2)", TASK_CHANGES_CHANNEL, graph_id)


async def notify_tasks_added(conn: asyncpg.Connection, project_id: str, graph_id: str) -> None:
    """Wakes dispatchers, and the watchers of the graph the tasks were added to (delivered
    at commit, so never for a rolled-back batch)."""
    await conn.execute("SELECT pg_notify($1, $2)", TASKS_ADDED_CHANNEL, project_id)
    await notify_task_changes(conn, [graph_id])
