"""Enqueues committed together (migration 0034, group commit) on a real database: several
runs' admissions and inserts in one transaction, the cap exact within a group and across
two processes' groups, and one run's failure or replay never another's."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace

import asyncpg

from agentfleet.errors import NotFound, ResourceExhausted
from agentfleet.postgres import db
from services.executor.queue import RunQueue
from services.executor.store.group_commit import GroupCommit
from tests.integration.test_run_queue_admission import params, queued_count, queued_rows

PROJECTS = ("alpha", "beta", "gamma")


async def test_concurrent_enqueues_of_many_projects_commit_in_groups(database_url: str) -> None:
    """60 enqueues at once over 3 projects: most go in groups, every run has its RUN_QUEUED,
    and each project's counter equals its queued runs."""
    pool = await db.create_pool(database_url, min_size=10, max_size=10)
    try:
        group = GroupCommit(pool)
        queue = RunQueue(pool, max_queued_per_project=1000, group=group)
        results = await asyncio.gather(*(queue.enqueue(params(PROJECTS[i % 3])) for i in range(60)))
        assert all(created for _, created in results)
        assert group.groups >= 1
        assert group.grouped_writes >= 30, group.grouped_writes
        ids = [run.id for run, _ in results]
        events = await pool.fetch(
            "SELECT run_id::text, seq, type FROM kb.agent_run_events"
            " WHERE run_id = ANY($1::uuid[])",
            ids,
        )
        assert sorted((e["run_id"], e["seq"], e["type"]) for e in events) == sorted(
            (i, 1, "run_queued") for i in ids
        )
        for project in PROJECTS:
            assert await queued_count(pool, project) == await queued_rows(pool, project) == 20
    finally:
        await pool.close()


async def test_a_run_whose_definition_is_gone_fails_alone(db_pool: asyncpg.Pool) -> None:
    """A definition deleted under one run of a group: that run is NotFound, naming its agent,
    and the others are queued and counted."""
    queue = RunQueue(db_pool, max_queued_per_project=100)
    gone = replace(params(), agent_name="deleted", agent_definition_id=str(uuid.uuid4()))
    batch = [params() for _ in range(12)]
    batch[6] = gone
    results = await asyncio.gather(*(queue.enqueue(p) for p in batch), return_exceptions=True)
    assert isinstance(results[6], NotFound)
    assert "'deleted'" in str(results[6])
    assert all(isinstance(r, tuple) for i, r in enumerate(results) if i != 6), results
    assert await queued_rows(db_pool, "proj") == await queued_count(db_pool, "proj") == 11


async def test_a_request_replayed_within_a_group_is_queued_once(db_pool: asyncpg.Pool) -> None:
    queue = RunQueue(db_pool, max_queued_per_project=100)
    results = await asyncio.gather(*(queue.enqueue(params(request_id="r1")) for _ in range(10)))
    assert sum(created for _, created in results) == 1
    assert len({run.id for run, _ in results}) == 1
    assert await queued_rows(db_pool, "proj") == await queued_count(db_pool, "proj") == 1


async def test_two_processes_groups_admit_exactly_the_cap(database_url: str) -> None:
    """Two executors' queues (their own pools and groups) enqueue 150 runs each into one
    project with a cap of 40 spread over 16 shards: exactly 40 admitted, every other one
    refused as full (no deadlock, no other error), and the counters exact."""
    pools = [await db.create_pool(database_url, min_size=20, max_size=20) for _ in range(2)]
    try:
        queues = [RunQueue(p, max_queued_per_project=40, group=GroupCommit(p)) for p in pools]
        results = await asyncio.gather(
            *(queues[i % 2].enqueue(params()) for i in range(300)), return_exceptions=True
        )
        assert sum(isinstance(r, tuple) for r in results) == 40
        others = [r for r in results if not isinstance(r, tuple)]
        assert all(isinstance(r, ResourceExhausted) for r in others), {type(r) for r in others}
        assert await queued_rows(pools[0], "proj") == await queued_count(pools[0], "proj") == 40
    finally:
        for pool in pools:
            await pool.close()
