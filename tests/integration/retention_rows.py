"""Run trees with history, finished a given number of days ago, for the retention tests."""

from __future__ import annotations

import uuid

import asyncpg

_INSERT_RUN = """
INSERT INTO kb.agent_runs (id, project_id, agent_name, input, status, parent_run_id,
                           root_run_id, depth, thread_id, task_id, started_at, completed_at,
                           lease_owner, lease_expires_at, waiting_since, last_event_seq)
VALUES ($1::uuid, $2, 'helper', 'hello', $3, $4::uuid, $5::uuid, $6, $7, $8::uuid,
        now() - interval '400 days',
        CASE WHEN $9 THEN now() - make_interval(secs => $10 * 86400) END,
        CASE WHEN $3 = 'running' THEN 'w' END,
        CASE WHEN $3 = 'running' THEN now() + interval '1 hour' END,
        CASE WHEN $3 = 'waiting' THEN now() END, 1)
"""


async def add_history(pool: asyncpg.Pool, run_id: str, root_id: str) -> None:
    """One message, one tool call and one event."""
    message = await pool.fetchval(
        "INSERT INTO kb.agent_run_messages (run_id, seq, role, agent_name, content)"
        " VALUES ($1::uuid, 0, 'user', 'helper', '{}') RETURNING id",
        run_id,
    )
    await pool.execute(
        "INSERT INTO kb.agent_run_tool_calls (run_id, message_id, tool_call_id, tool_name,"
        " source, status) VALUES ($1::uuid, $2, 'c1', 'get_entity', 'builtin', 'completed')",
        run_id,
        message,
    )
    await pool.execute(
        "INSERT INTO kb.agent_run_events (run_id, seq, root_run_id, type, agent_name, payload)"
        " VALUES ($1::uuid, 1, $2::uuid, 'run_queued', 'helper', '{}')",
        run_id,
        root_id,
    )


async def finished_tree(
    pool: asyncpg.Pool,
    project: str,
    *,
    age_days: float,
    children: int = 0,
    status: str = "completed",
    thread_id: str | None = None,
    task_id: str | None = None,
) -> list[str]:
    """A top-level run and ``children`` children, each with history, ended ``age_days``
    ago in ``status`` (a status that has not ended leaves completed_at unset); the root
    first. Written as rows, never queued: no executor of a test stack takes them."""
    ended = status in ("completed", "failed", "cancelled", "paused")
    root = str(uuid.uuid4())
    ids = [root] + [str(uuid.uuid4()) for _ in range(children)]
    for run_id in ids:
        is_root = run_id == root
        await pool.execute(
            _INSERT_RUN,
            run_id,
            project,
            status,
            None if is_root else root,
            root,
            0 if is_root else 1,
            thread_id if is_root else None,
            task_id if is_root else None,
            ended,
            age_days,
        )
        await add_history(pool, run_id, root)
    return ids


async def surviving(pool: asyncpg.Pool, ids: list[str]) -> set[str]:
    rows = await pool.fetch("SELECT id::text FROM kb.agent_runs WHERE id = ANY($1::uuid[])", ids)
    return {r["id"] for r in rows}


async def rows_of(pool: asyncpg.Pool, ids: list[str]) -> dict[str, int]:
    """Rows of each history table that belong to ``ids``."""
    counts = {}
    for table in ("agent_run_messages", "agent_run_tool_calls", "agent_run_events"):
        counts[table] = await pool.fetchval(
            f"SELECT count(*) FROM kb.{table} WHERE run_id = ANY($1::uuid[])", ids
        )
    return counts
