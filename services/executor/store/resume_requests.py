"""``kb.agent_run_resume_requests`` (migration 0016): the ResumeRun request ids of a run, each
naming the STATUS_CHANGED its resume recorded. Keyed by run: callers have read the run by
project (and locked it) first."""

from __future__ import annotations

import asyncpg


async def event_seq(conn: asyncpg.Connection, run_id: str, request_id: str) -> int | None:
    """seq of the STATUS_CHANGED of the run's earlier resume with ``request_id``."""
    seq = await conn.fetchval(
        "SELECT event_seq FROM kb.agent_run_resume_requests "
        "WHERE run_id = $1::uuid AND request_id = $2",
        run_id,
        request_id,
    )
    return int(seq) if seq is not None else None


async def record(conn: asyncpg.Connection, run_id: str, request_id: str, event_seq: int) -> None:
    await conn.execute(
        "INSERT INTO kb.agent_run_resume_requests (run_id, request_id, event_seq) "
        "VALUES ($1::uuid, $2, $3)",
        run_id,
        request_id,
        event_seq,
    )
