"""The run queue and the run worker on a real database: idempotent enqueue, SKIP LOCKED
claims, leases, conditional transitions, cancel requests, and two workers sharing a queue."""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from dataclasses import replace

import asyncpg
import pytest

from agentfleet import events
from agentfleet.errors import NotFound, ResourceExhausted
from agentfleet.postgres import db
from agentfleet.postgres.db import Listener, transaction
from services.executor.queue import CANCEL_CHANNEL, QUEUED_CHANNEL, RunQueue
from services.executor.registry.definitions import AgentDefinition, DefinitionRepository
from services.executor.run_path.loop import RunControl
from services.executor.runs import RunRecord, StartRunParams
from services.executor.store import runs
from services.executor.store.claim_sql import CLAIM
from services.executor.worker import RunWorker

PROJECT = "proj"


def params(request_id: str | None = None, input: str = "hello") -> StartRunParams:
    return StartRunParams(
        project_id=PROJECT,
        agent_name="helper",
        agent_definition_id=None,
        input=input,
        request_id=request_id,
        labels={"k": "v"},
        timeout_s=12.5,
    )


async def test_same_request_id_returns_the_same_run(db_pool: asyncpg.Pool) -> None:
    queue = RunQueue(db_pool)
    first, created = await queue.enqueue(params("req-1"))
    again, created_again = await queue.enqueue(params("req-1", input="other"))
    assert created
    assert not created_again
    assert again.id == first.id
    assert again.input == "hello"
    assert first.status == "queued"
    assert first.labels == {"k": "v"}
    assert first.timeout is not None
    assert first.timeout.total_seconds() == 12.5
    assert await db_pool.fetchval("SELECT count(*) FROM kb.agent_runs") == 1
    stored = await events.read_events(db_pool, project_id=PROJECT, run_id=first.id)
    assert [e.event.type for e in stored] == ["run_queued"]
    other, created_other = await queue.enqueue(params(None))
    assert created_other
    assert other.id != first.id


async def test_enqueue_wakes_the_workers_once_per_new_run(
    db_pool: asyncpg.Pool, database_url: str
) -> None:
    queue = RunQueue(db_pool)
    heard: asyncio.Queue = asyncio.Queue()
    async with Listener(database_url) as listener:
        await listener.subscribe(QUEUED_CHANNEL, heard)
        first, _ = await queue.enqueue(params("req-1"))
        await queue.enqueue(params("req-1"))  # the same run: nothing new to claim
        other, _ = await queue.enqueue(params(None))
        payloads = []
        async with asyncio.timeout(5):
            while other.id not in payloads:  # notifications arrive in commit order
                payloads.append((await heard.get()).payload)
    assert payloads == [first.id, other.id]


async def test_an_enqueue_notifies_once_it_has_committed_not_in_its_transaction(
    database_url: str,
) -> None:
    """A transaction that NOTIFYs holds the cluster's notification lock through its commit's
    WAL flush; the enqueue is one statement (no transaction block) that sends none, and the
    workers' wake-up and the RUN_QUEUED notification follow it, in one statement."""
    logged: list[tuple[str, tuple[object, ...]]] = []

    async def init(conn: asyncpg.Connection) -> None:
        await db._init_connection(conn)
        conn.add_query_logger(lambda record: logged.append((record.query, record.args)))

    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=1, init=init)
    heard: asyncio.Queue = asyncio.Queue()
    try:
        async with Listener(database_url) as listener:
            await listener.subscribe(QUEUED_CHANNEL, heard)
            await listener.subscribe(events.CHANNEL, heard)
            run, _ = await RunQueue(pool).enqueue(params(None))
            got = set()
            async with asyncio.timeout(5):
                while len(got) < 2:
                    got.add((await heard.get()).payload)
    finally:
        await pool.close()
    assert got == {run.id, f"{run.id}:1"}
    queries = [q for q, _ in logged]
    assert "BEGIN;" not in queries, queries
    insert = queries.index(runs._INSERT_AND_NOTIFY)
    # The insert writes the run and its RUN_QUEUED (an implicit transaction of its own); it
    # can NOTIFY both, and does only when its switch ($26) is on.
    can_notify = [(q, args) for q, args in logged[: insert + 1] if "pg_notify" in q]
    assert [q for q, _ in can_notify] == [runs._INSERT_AND_NOTIFY], logged
    assert [args[25] for _, args in can_notify] == [False], can_notify
    assert [q for q in queries[insert + 1 :] if "pg_notify" in q], queries


async def test_concurrent_claims_take_every_run_exactly_once(db_pool: asyncpg.Pool) -> None:
    queue = RunQueue(db_pool)
    ids = {(await queue.enqueue(params()))[0].id for _ in range(40)}

    async def claimer(name: str) -> list[str]:
        taken: list[str] = []
        while batch := await queue.claim_next(name, 30.0, limit=3):
            taken += [r.id for r in batch]
            assert all(r.status == "running" and r.lease_owner == name for r in batch)
        return taken

    results = await asyncio.gather(*(claimer(f"w{i}") for i in range(5)))
    claimed = Counter(run_id for taken in results for run_id in taken)
    assert set(claimed) == ids
    assert set(claimed.values()) == {1}


async def test_concurrent_claimers_of_one_project_each_get_a_run(db_pool: asyncpg.Pool) -> None:
    """Claimers that race for the same project's oldest runs skip the ones locked by each
    other and take the next; none comes back empty while runs are queued."""
    queue = RunQueue(db_pool)
    ids = {(await queue.enqueue(params()))[0].id for _ in range(24)}

    batches = await asyncio.gather(*(queue.claim_next(f"w{i}", 30.0) for i in range(24)))

    assert [len(batch) for batch in batches] == [1] * 24
    assert {batch[0].id for batch in batches} == ids


async def test_a_claim_never_takes_more_than_its_limit(db_pool: asyncpg.Pool) -> None:
    queue = RunQueue(db_pool)
    for _ in range(60):
        await queue.enqueue(params())
    await db_pool.execute("ANALYZE kb.agent_runs")
    sizes = []
    while batch := await queue.claim_next("me", 30.0, limit=1):
        sizes.append(len(batch))
    assert sizes == [1] * 60
    running = await db_pool.fetchval(
        "SELECT count(*) FROM kb.agent_runs WHERE status = 'running' AND lease_owner = 'me'"
    )
    assert running == 60


async def test_one_projects_backlog_cannot_take_every_slot(db_pool: asyncpg.Pool) -> None:
    queue = RunQueue(db_pool, max_running_per_project=2)
    busy = [(await queue.enqueue(params()))[0].id for _ in range(10)]  # the older backlog
    other = replace(params(), project_id="quiet")
    quiet = [(await queue.enqueue(other))[0].id for _ in range(2)]
    claimed = [r for _ in range(6) for r in await queue.claim_next("w", 30.0, limit=1)]
    by_project = Counter(r.project_id for r in claimed)
    assert by_project == {PROJECT: 2, "quiet": 2}
    assert {r.id for r in claimed} == set(busy[:2]) | set(quiet)
    # A finished run frees its slot for the next of the backlog, oldest first.
    first = next(r for r in claimed if r.project_id == PROJECT)
    async with db_pool.acquire() as conn:
        assert await runs.finish(
            conn,
            first.project_id,
            first.id,
            status="completed",
            summary="",
            error_message=None,
            from_statuses=("running",),
        )
    (next_run,) = await queue.claim_next("w", 30.0, limit=5)
    assert next_run.id == busy[2]
    # Children are exempt: a waiting parent must never block its own children.
    child = (
        await queue.enqueue(
            replace(params(), parent_run_id=first.id, root_run_id=first.id, depth=1)
        )
    )[0]
    (claimed_child,) = await queue.claim_next("w", 30.0, limit=5)
    assert claimed_child.id == child.id


async def test_runs_of_tasks_count_toward_the_caps_children_do_not(
    db_pool: asyncpg.Pool,
) -> None:
    """A run of a task counts toward both caps even under a parent (task_lineage puts it
    under the task's creator); a child its parent started itself counts toward neither."""
    queue = RunQueue(db_pool, max_running_per_project=1, max_queued_per_project=1)
    parent = (await queue.enqueue(params()))[0]
    assert [r.id for r in await queue.claim_next("w", 30.0, limit=5)] == [parent.id]
    task_id = await db_pool.fetchval(
        "INSERT INTO kb.graph_objects (project_id, type, properties)"
        " VALUES ($1, 'SpecTask', '{}') RETURNING id::text",
        PROJECT,
    )
    under_parent = replace(params(), parent_run_id=parent.id, root_run_id=parent.id, depth=1)
    task_run = (await queue.enqueue(replace(under_parent, task_id=task_id)))[0]
    with pytest.raises(ResourceExhausted, match="1 queued runs"):
        await queue.enqueue(replace(under_parent, task_id=task_id))
    children = [(await queue.enqueue(under_parent))[0] for _ in range(2)]
    # The parent holds the one running slot: its children run, the task's run waits.
    claimed = await queue.claim_next("w", 30.0, limit=5)
    assert {r.id for r in claimed} == {c.id for c in children}
    assert (await queue.get(PROJECT, task_run.id)).status == "queued"


async def test_one_claim_takes_expired_runs_first_then_queued_ones(
    db_pool: asyncpg.Pool,
) -> None:
    queue = RunQueue(db_pool)
    for _ in range(4):
        await queue.enqueue(params())
    dead = await queue.claim_next("dead-worker", 30.0, limit=2)
    await queue.release([r.id for r in dead], "dead-worker")  # leases end now
    oldest_queued = (await queue.claim_next("peek", 30.0, limit=1))[0]
    await queue.release([oldest_queued.id], "peek")

    # Three expired runs and one queued: a slot for one goes to an expired run.
    (first,) = await queue.claim("me", 30.0, limit=1)
    assert first.previous_owner in ("dead-worker", "peek")
    rest = await queue.claim("me", 30.0, limit=5)
    assert len(rest) == 3
    taken_over = {c.run.id for c in [first, *rest] if c.previous_owner is not None}
    assert taken_over == {r.id for r in dead} | {oldest_queued.id}
    (queued,) = [c.run for c in rest if c.previous_owner is None]
    assert queued.status == "running"
    assert queued.lease_owner == "me"
    assert await queue.claim("me", 30.0, limit=5) == []
    rows = await db_pool.fetch("SELECT lease_owner FROM kb.agent_runs")
    assert [r["lease_owner"] for r in rows] == ["me"] * 4


async def test_claim_uses_the_per_project_queued_index(db_pool: asyncpg.Pool) -> None:
    async with transaction(db_pool) as conn:
        await conn.execute("SET LOCAL enable_seqscan = off")
        plan = await conn.fetchval("EXPLAIN (FORMAT JSON) " + CLAIM, "me", 30.0, 3, 64)
    assert "agent_runs_queued_project_idx" in json.dumps(plan)
    # Each project's two offers (capped, exempt) are ranges of the index's cap key, not
    # filters over the project's whole queue: the SQL spells the key as the index does.
    conditions = re.findall(r'"Index Cond": "([^"]*task_id IS NOT NULL[^"]*)"', json.dumps(plan))
    assert sorted(c.rsplit(" = ", 1)[-1] for c in conditions) == ["false))", "true))"], plan


async def test_heartbeat_renews_only_own_leases_and_reports_cancel(db_pool: asyncpg.Pool) -> None:
    queue = RunQueue(db_pool)
    for _ in range(2):
        await queue.enqueue(params())
    (mine,) = await queue.claim_next("me", 5.0)
    (theirs,) = await queue.claim_next("them", 5.0)
    await queue.request_cancel(PROJECT, mine.id)
    result = await queue.heartbeat([mine.id, theirs.id], "me", 60.0)
    assert result.held == {mine.id}
    assert result.cancel_requested == {mine.id}
    renewed = await queue.get(PROJECT, mine.id)
    assert renewed.lease_expires_at is not None
    assert mine.lease_expires_at is not None
    assert renewed.lease_expires_at > mine.lease_expires_at
    assert await queue.release([mine.id], "me") == 1


async def test_finish_is_conditional(db_pool: asyncpg.Pool) -> None:
    queue = RunQueue(db_pool)
    await queue.enqueue(params())
    (run,) = await queue.claim_next("me", 5.0)
    async with transaction(db_pool) as conn:
        done = await runs.finish(conn, run.project_id, run.id, status="completed", summary="ok")
        again = await runs.finish(
            conn, run.project_id, run.id, status="failed", error_message="late"
        )
    assert done is not None
    assert done.status == "completed"
    assert done.duration_ms is not None
    assert done.lease_owner is None
    assert done.completed_at is not None
    assert again is None


async def test_cancel_of_queued_running_and_finished_runs(
    db_pool: asyncpg.Pool, database_url: str
) -> None:
    queue = RunQueue(db_pool)
    queued, _ = await queue.enqueue(params())
    cancelled = await queue.request_cancel(PROJECT, queued.id, "not needed")
    assert cancelled.status == "cancelled"
    assert cancelled.completed_at is not None
    stored = await events.read_events(db_pool, project_id=PROJECT, run_id=queued.id)
    assert [e.event.type for e in stored] == ["run_queued", "status_changed", "run_finished"]
    assert stored[1].event.reason == "not needed"  # type: ignore[union-attr]
    # Ended runs are returned unchanged.
    assert (await queue.request_cancel(PROJECT, queued.id)).status == "cancelled"

    await queue.enqueue(params())
    (running,) = await queue.claim_next("me", 5.0)
    heard: asyncio.Queue = asyncio.Queue()
    async with Listener(database_url) as listener:
        await listener.subscribe(CANCEL_CHANNEL, heard)
        requested = await queue.request_cancel(PROJECT, running.id, "stop it")
        async with asyncio.timeout(5):
            notification = await heard.get()
    assert requested.status == "running"
    assert requested.cancel_requested_at is not None
    assert json.loads(notification.payload) == {"run_id": running.id, "reason": "stop it"}

    with pytest.raises(NotFound):
        await queue.request_cancel("other-project", running.id)


class _RecordingExecutor:
    """Counts executions; blocks runs whose input is "block" until cancelled."""

    def __init__(self, pool: asyncpg.Pool, expected: int) -> None:
        self.pool = pool
        self.expected = expected
        self.all_done = asyncio.Event()
        self.cancel_seen = asyncio.Event()
        self.executed: Counter[str] = Counter()
        self.finished = 0
        self.cancelled: dict[str, str | None] = {}
        self.blocking = asyncio.Event()

    async def execute(self, run: RunRecord, control: RunControl) -> RunRecord | None:
        self.executed[run.id] += 1
        if run.input == "block":
            self.blocking.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled[run.id] = control.cancel_reason
                self.cancel_seen.set()
                return None
        await asyncio.sleep(0)
        async with transaction(self.pool) as conn:
            await runs.finish(conn, run.project_id, run.id, status="completed", summary="ok")
        # Counted once committed: a run started last may finish before one started earlier.
        self.finished += 1
        if self.finished >= self.expected:
            self.all_done.set()
        return None


async def test_two_workers_execute_each_run_once_and_cancel_by_notify(
    db_pool: asyncpg.Pool, database_url: str
) -> None:
    await DefinitionRepository(db_pool).upsert(PROJECT, AgentDefinition(name="helper"))
    queue = RunQueue(db_pool)
    executor = _RecordingExecutor(db_pool, expected=50)
    stopping = asyncio.Event()
    async with Listener(database_url) as l1, Listener(database_url) as l2:
        workers = [
            RunWorker(queue=queue, executor=executor, listener=listener, concurrency=4, poll_s=5)
            for listener in (l1, l2)
        ]
        loops = [asyncio.create_task(w.run(stopping)) for w in workers]
        try:
            ids = [(await queue.enqueue(params()))[0].id for _ in range(50)]

            # poll_s=5: finishing in time means the NOTIFY woke the workers.
            async with asyncio.timeout(4):
                await executor.all_done.wait()
            completed = await db_pool.fetchval(
                "SELECT count(*) FROM kb.agent_runs WHERE status = 'completed'"
            )
            assert completed == 50
            assert set(executor.executed) == set(ids)
            assert set(executor.executed.values()) == {1}

            blocked, _ = await queue.enqueue(params(input="block"))
            async with asyncio.timeout(5):
                await executor.blocking.wait()
            await queue.request_cancel(PROJECT, blocked.id, "by test")

            async with asyncio.timeout(1):
                await executor.cancel_seen.wait()
            assert executor.cancelled[blocked.id] == "by test"
        finally:
            stopping.set()
            await asyncio.gather(*loops)
