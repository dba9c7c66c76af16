"""The queued-runs cap admitted on a per-project counter (migration 0030) on a real database:
exact under concurrent enqueues, kept by every transition into and out of ``queued``, and
one project's counter never touched by another's runs."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import replace

import asyncpg
import pytest

from agentfleet.errors import ResourceExhausted
from agentfleet.postgres import db
from services.executor.queue import RunQueue
from services.executor.runs import StartRunParams

PROJECT = "proj"
OTHER = "other"


def params(project: str = PROJECT, request_id: str | None = None) -> StartRunParams:
    return StartRunParams(
        project_id=project,
        agent_name="helper",
        agent_definition_id=None,
        input="hello",
        request_id=request_id,
    )


async def queued_count(pool: asyncpg.Pool, project: str) -> int:
    """The counter with its pending deltas: what the next admission would start from."""
    return int(
        await pool.fetchval(
            "SELECT coalesce((SELECT sum(queued) FROM kb.run_queue_counts"
            " WHERE project_id = $1), 0)"
            " + coalesce((SELECT sum(delta) FROM kb.run_queue_deltas WHERE project_id = $1), 0)",
            project,
        )
    )


async def queued_rows(pool: asyncpg.Pool, project: str) -> int:
    return int(
        await pool.fetchval(
            "SELECT count(*) FROM kb.agent_runs WHERE project_id = $1 AND status = 'queued'"
            " AND (depth = 0 OR task_id IS NOT NULL)",
            project,
        )
    )


async def test_concurrent_enqueues_admit_exactly_the_cap(database_url: str) -> None:
    """120 enqueues at once on 40 connections against a cap of 7: exactly 7 are queued, the
    rest refused with ResourceExhausted naming the setting, and nothing of theirs is left."""
    pool = await db.create_pool(database_url, min_size=40, max_size=40)
    try:
        queue = RunQueue(pool, max_queued_per_project=7)
        results = await asyncio.gather(
            *(queue.enqueue(params()) for _ in range(120)), return_exceptions=True
        )
        accepted = [r for r in results if isinstance(r, tuple)]
        refused = [r for r in results if isinstance(r, ResourceExhausted)]
        assert len(accepted) == 7
        assert len(refused) == 113
        assert all("AGENTFLEET_MAX_QUEUED_PER_PROJECT" in str(e) for e in refused)
        assert await queued_rows(pool, PROJECT) == 7
        assert await pool.fetchval("SELECT count(*) FROM kb.agent_run_events") == 7
        assert await queued_count(pool, PROJECT) == 7
    finally:
        await pool.close()


async def test_claims_and_enqueues_at_once_never_pass_the_cap(database_url: str) -> None:
    """Enqueues racing claims (which free places) and cancels: the queue never holds more
    than the cap, and the counter ends equal to the queued rows."""
    pool = await db.create_pool(database_url, min_size=30, max_size=30)
    cap = 5
    try:
        queue = RunQueue(pool, max_queued_per_project=cap, max_running_per_project=10_000)
        over: list[int] = []

        async def enqueue_many() -> None:
            for _ in range(15):
                with contextlib.suppress(ResourceExhausted):
                    await queue.enqueue(params())

        async def claim_some(owner: str) -> None:
            for _ in range(10):
                await queue.claim_next(owner, 30.0, limit=1)
                over.append(await queued_rows(pool, PROJECT))

        await asyncio.gather(
            *(enqueue_many() for _ in range(12)), *(claim_some(f"w{i}") for i in range(4))
        )
        assert max(over) <= cap
        for run_id in await pool.fetch(
            "SELECT id::text FROM kb.agent_runs WHERE status = 'queued' LIMIT 2"
        ):
            await queue.request_cancel(PROJECT, run_id["id"])
        assert await queued_count(pool, PROJECT) == await queued_rows(pool, PROJECT)
    finally:
        await pool.close()


async def test_places_freed_by_claim_cancel_and_delete_are_admitted_again(
    db_pool: asyncpg.Pool,
) -> None:
    queue = RunQueue(db_pool, max_queued_per_project=2)
    first = (await queue.enqueue(params()))[0]
    second = (await queue.enqueue(params()))[0]
    with pytest.raises(ResourceExhausted):
        await queue.enqueue(params())
    await queue.claim_next("w", 30.0)  # the oldest leaves the queue
    third = (await queue.enqueue(params()))[0]
    with pytest.raises(ResourceExhausted):
        await queue.enqueue(params())
    await queue.request_cancel(PROJECT, second.id)
    (await queue.enqueue(params()))[0]
    await db_pool.execute("DELETE FROM kb.agent_runs WHERE id = $1::uuid", third.id)
    (await queue.enqueue(params()))[0]
    with pytest.raises(ResourceExhausted):
        await queue.enqueue(params())
    assert first.id != third.id
    assert await queued_count(db_pool, PROJECT) == await queued_rows(db_pool, PROJECT) == 2


async def test_a_waiting_run_requeued_counts_again(db_pool: asyncpg.Pool) -> None:
    """waiting -> queued (approval decided) is a +1 the next admission sees: not admitted
    again (it was once), but it holds a place."""
    queue = RunQueue(db_pool, max_queued_per_project=2)
    run = (await queue.enqueue(params()))[0]
    await queue.claim_next("w", 30.0)
    await db_pool.execute(
        "UPDATE kb.agent_runs SET status = 'waiting', lease_owner = NULL,"
        " lease_expires_at = NULL, waiting_since = now() WHERE id = $1::uuid",
        run.id,
    )
    await queue.enqueue(params())
    await db_pool.execute(
        "UPDATE kb.agent_runs SET status = 'queued', waiting_since = NULL WHERE id = $1::uuid",
        run.id,
    )
    with pytest.raises(ResourceExhausted):
        await queue.enqueue(params())
    assert await queued_count(db_pool, PROJECT) == 2


async def test_a_replayed_request_id_takes_no_place(db_pool: asyncpg.Pool) -> None:
    queue = RunQueue(db_pool, max_queued_per_project=2)
    await queue.enqueue(params(request_id="r1"))
    for _ in range(3):
        _, created = await queue.enqueue(params(request_id="r1"))
        assert not created
    await queue.enqueue(params())
    assert await queued_count(db_pool, PROJECT) == 2


async def test_children_take_no_place(db_pool: asyncpg.Pool) -> None:
    queue = RunQueue(db_pool, max_queued_per_project=1)
    parent = (await queue.enqueue(params()))[0]
    child = replace(params(), parent_run_id=parent.id, root_run_id=parent.id, depth=1)
    for _ in range(3):
        await queue.enqueue(child)
    assert await queued_count(db_pool, PROJECT) == 1


async def test_one_projects_cap_never_counts_anothers_runs(db_pool: asyncpg.Pool) -> None:
    """A full project refuses; another project's enqueues, claims and cancels never move its
    counter, and its own are admitted up to the same cap."""
    queue = RunQueue(db_pool, max_queued_per_project=2)
    for _ in range(2):
        await queue.enqueue(params())
    for _ in range(2):
        other = (await queue.enqueue(params(OTHER)))[0]
    with pytest.raises(ResourceExhausted):
        await queue.enqueue(params(OTHER))
    await queue.request_cancel(OTHER, other.id)
    await queue.enqueue(params(OTHER))
    with pytest.raises(ResourceExhausted):
        await queue.enqueue(params())
    assert await queued_count(db_pool, PROJECT) == 2
    assert await queued_count(db_pool, OTHER) == 2


async def test_a_cap_spread_over_every_shard_is_exact_under_concurrency(
    database_url: str,
) -> None:
    """A cap of 40 over 16 counter shards (quotas of 2 and 3): 200 enqueues on 40
    connections admit exactly 40, runs moved out of full shards included, and each shard
    ends within its quota."""
    pool = await db.create_pool(database_url, min_size=40, max_size=40)
    try:
        queue = RunQueue(pool, max_queued_per_project=40)
        results = await asyncio.gather(
            *(queue.enqueue(params()) for _ in range(200)), return_exceptions=True
        )
        assert sum(isinstance(r, tuple) for r in results) == 40
        assert sum(isinstance(r, ResourceExhausted) for r in results) == 160
        assert await queued_rows(pool, PROJECT) == 40
        assert await queued_count(pool, PROJECT) == 40
        rows = await pool.fetch(
            "SELECT queue_shard AS shard, count(*) AS n FROM kb.agent_runs"
            " WHERE project_id = $1 AND status = 'queued' GROUP BY queue_shard",
            PROJECT,
        )
        quotas = {
            r["shard"]: await pool.fetchval("SELECT kb.run_queue_quota($1, 40)", r["shard"])
            for r in rows
        }
        assert all(r["n"] <= quotas[r["shard"]] for r in rows), rows
    finally:
        await pool.close()


async def test_enqueues_in_callers_transactions_admit_exactly_the_cap(
    database_url: str,
) -> None:
    """The path of callers that enqueue inside a transaction of their own (the trigger
    consumer, thread runs), which cannot go again after a full shard: 200 at once on 40
    connections against a cap of 40 admit exactly 40, and every refused one leaves
    nothing."""
    pool = await db.create_pool(database_url, min_size=40, max_size=40)

    async def enqueue_in_own_transaction() -> bool:
        async with pool.acquire() as conn, conn.transaction():
            try:
                await RunQueue.enqueue_in(conn, params(), max_queued=40)
            except ResourceExhausted:
                return False
            return True

    try:
        admitted = await asyncio.gather(*(enqueue_in_own_transaction() for _ in range(200)))
        assert sum(admitted) == 40
        assert await queued_rows(pool, PROJECT) == 40
        assert await pool.fetchval("SELECT count(*) FROM kb.agent_run_events") == 40
        assert await queued_count(pool, PROJECT) == 40
    finally:
        await pool.close()


async def test_a_changed_cap_is_applied_exactly(db_pool: asyncpg.Pool) -> None:
    """Runs queued under a cap of 20 stay counted when the deployment lowers it to 5 (no
    more admitted) or raises it to 30 (exactly 10 more)."""
    for _ in range(20):
        await RunQueue(db_pool, max_queued_per_project=20).enqueue(params())
    with pytest.raises(ResourceExhausted):
        await RunQueue(db_pool, max_queued_per_project=5).enqueue(params())
    raised = RunQueue(db_pool, max_queued_per_project=30)
    for _ in range(10):
        await raised.enqueue(params())
    with pytest.raises(ResourceExhausted):
        await raised.enqueue(params())
    assert await queued_rows(db_pool, PROJECT) == await queued_count(db_pool, PROJECT) == 30


async def test_a_queued_task_run_whose_task_is_deleted_frees_its_place(
    db_pool: asyncpg.Pool,
) -> None:
    """A task's run under a parent counts only while it has its task: deleting the task
    (task_id set NULL by the foreign key) takes it out of the count."""
    queue = RunQueue(db_pool, max_queued_per_project=2)
    parent = (await queue.enqueue(params()))[0]
    task_id = await db_pool.fetchval(
        "INSERT INTO kb.graph_objects (project_id, type, properties)"
        " VALUES ($1, 'SpecTask', '{}') RETURNING id::text",
        PROJECT,
    )
    under = replace(
        params(), parent_run_id=parent.id, root_run_id=parent.id, depth=1, task_id=task_id
    )
    await queue.enqueue(under)
    with pytest.raises(ResourceExhausted):
        await queue.enqueue(params())
    await db_pool.execute("DELETE FROM kb.graph_objects WHERE id = $1::uuid", task_id)
    assert await queued_count(db_pool, PROJECT) == await queued_rows(db_pool, PROJECT) == 1
    await queue.enqueue(params())
