"""Migration 0016: resumes recorded before it (their request_id only in the STATUS_CHANGED
reason) are found by key afterwards; a cancel whose free-text reason reads alike is not."""

from __future__ import annotations

import asyncpg
import pytest

from agentfleet import events
from agentfleet.errors import FailedPrecondition
from agentfleet.postgres.migrate import migrate_down, migrate_up
from services.executor.queue import RunQueue
from services.executor.run_path.resume import ResumeParams, resume_run
from services.executor.runs import RunRecord, StartRunParams

PROJECT = "proj"
RESUME_REQUESTS = 16


async def _queued(pool: asyncpg.Pool) -> RunRecord:
    """A run, queued by this code: before the schema goes back, whose statements it may need."""
    run, _ = await RunQueue(pool).enqueue(
        StartRunParams(project_id=PROJECT, agent_name="agent", agent_definition_id=None, input="go")
    )
    return run


async def _changes(pool: asyncpg.Pool, run: RunRecord, *changes: tuple[str, str, str]) -> list[int]:
    async with pool.acquire() as conn, conn.transaction():
        stored = await events.append_events(
            conn,
            project_id=PROJECT,
            run_id=run.id,
            root_run_id=run.root_run_id,
            events=[
                events.StatusChanged(
                    agent_name="agent",
                    from_status=before,  # type: ignore[arg-type]
                    to_status=after,  # type: ignore[arg-type]
                    reason=reason,
                )
                for before, after, reason in changes
            ],
        )
    return [e.seq for e in stored]


async def test_earlier_resumes_are_keyed_by_their_request_id(
    database_url: str, db_pool: asyncpg.Pool
) -> None:
    first, second = await _queued(db_pool), await _queued(db_pool)
    resumed, forged = first.id, second.id
    await migrate_down(database_url, target=RESUME_REQUESTS - 1)
    _, _, again = await _changes(
        db_pool,
        first,
        ("paused", "running", "resumed (request_id old-1)"),
        ("running", "paused", "step_limit: summary given"),
        ("paused", "running", "resumed (request_id old-1)"),
    )
    await _changes(db_pool, second, ("paused", "cancelled", "resumed (request_id old-2)"))
    await db_pool.execute(
        "UPDATE kb.agent_runs SET status = 'cancelled', completed_at = now() WHERE id = $1", forged
    )
    assert await migrate_up(database_url)

    rows = await db_pool.fetch(
        "SELECT run_id::text, request_id, event_seq FROM kb.agent_run_resume_requests"
    )
    # The latest resume of a request_id is the one its replay streams (as before 0016).
    assert [tuple(r) for r in rows] == [(resumed, "old-1", again)]
    replay = await resume_run(
        db_pool, ResumeParams(project_id=PROJECT, run_id=resumed, request_id="old-1")
    )
    assert replay.after_seq == again - 1
    with pytest.raises(FailedPrecondition, match="is cancelled"):
        await resume_run(
            db_pool, ResumeParams(project_id=PROJECT, run_id=forged, request_id="old-2")
        )
