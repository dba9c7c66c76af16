"""``kb.agent_run_resume_requests`` (migration 0016): the ResumeRun request ids of a run, each
naming the STATUS_CHANGED its resume recorded, with the fingerprint of what that resume
asked (migration 0022). Keyed by run: callers have read the run by project (and locked it)
first."""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg


@dataclass(frozen=True, kw_only=True, slots=True)
class ResumeRequest:
    """An earlier resume of a run with a ``request_id``."""

    event_seq: int
    """seq of its STATUS_CHANGED(paused -> running)."""
    request_fingerprint: str | None
    """What it asked; None when recorded before migration 0022 or by spawn_agents."""


async def find(conn: asyncpg.Connection, run_id: str, request_id: str) -> ResumeRequest | None:
    """The run's earlier resume with ``request_id``, if there was one."""
    row = await conn.fetchrow(
        "SELECT event_seq, request_fingerprint FROM kb.agent_run_resume_requests "
        "WHERE run_id = $1::uuid AND request_id = $2",
        run_id,
        request_id,
    )
    if row is None:
        return None
    return ResumeRequest(
        event_seq=int(row["event_seq"]), request_fingerprint=row["request_fingerprint"]
    )


async def record(
    conn: asyncpg.Connection,
    run_id: str,
    request_id: str,
    event_seq: int,
    request_fingerprint: str | None,
) -> None:
    await conn.execute(
        "INSERT INTO kb.agent_run_resume_requests "
        "(run_id, request_id, event_seq, request_fingerprint) VALUES ($1::uuid, $2, $3, $4)",
        run_id,
        request_id,
        event_seq,
        request_fingerprint,
    )
