"""A tenant that keeps its queue at the cap shares the executor's enqueue groups with other
projects (migration 0034, group commit): its full counter shards fail their group's
statement, and that must never refuse, fail or lose another project's run."""

from __future__ import annotations

import asyncio

from agentfleet.errors import ResourceExhausted
from agentfleet.postgres import db
from services.executor.queue import RunQueue
from services.executor.store.group_commit import GroupCommit
from tests.integration.test_run_queue_admission import params, queued_count, queued_rows

HOSTILE = "hostile"
VICTIM = "victim"
CAP = 40


async def test_a_project_at_its_cap_never_fails_another_projects_enqueues(
    database_url: str,
) -> None:
    """300 enqueues of a project with a cap of 40 (so most land on full shards) interleaved
    with 30 of another project, on one process's group: the other's 30 are all queued, the
    hostile project gets exactly its cap and only ResourceExhausted beyond it."""
    pool = await db.create_pool(database_url, min_size=20, max_size=20)
    try:
        group = GroupCommit(pool)
        queue = RunQueue(pool, max_queued_per_project=CAP, group=group)
        projects = [VICTIM if i % 11 == 0 else HOSTILE for i in range(330)]
        results = await asyncio.gather(
            *(queue.enqueue(params(p)) for p in projects), return_exceptions=True
        )
        victim = [r for p, r in zip(projects, results, strict=True) if p == VICTIM]
        hostile = [r for p, r in zip(projects, results, strict=True) if p == HOSTILE]
        assert len(victim) == 30
        assert all(isinstance(r, tuple) and r[1] for r in victim), victim
        assert sum(isinstance(r, tuple) for r in hostile) == CAP
        assert all(isinstance(r, tuple | ResourceExhausted) for r in hostile), [
            r for r in hostile if not isinstance(r, tuple | ResourceExhausted)
        ]
        assert group.grouped_writes > 0
        assert await queued_rows(pool, VICTIM) == await queued_count(pool, VICTIM) == 30
        assert await queued_rows(pool, HOSTILE) == await queued_count(pool, HOSTILE) == CAP
    finally:
        await pool.close()
