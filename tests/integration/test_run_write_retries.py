"""A run's writes across a lost database connection (issue #18), on a real PostgreSQL: a
write whose connection the server killed is retried on a new one, a write that committed
but whose reply was lost is recognised on the retry, not applied twice, and an execution
cut by an outage is run again by its own worker rather than failed.

The lost reply is injected by :class:`RepliesLost`, a pool that runs each statement for
real and then fails the way asyncpg does when the server goes away after the commit (a
timing no real restart can hit on purpose).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
from google.genai import types

from agentfleet import events as ev
from agentfleet.llm import ModelReply, TokenUsage
from agentfleet.postgres import db
from agentfleet.postgres.db import Listener
from agentfleet.reconnect import is_disconnect
from agentfleet.testing import factories as f
from agentfleet.testing.checks.invariants import assert_invariants
from agentfleet.testing.waiting import wait_for, wait_for_query
from services.executor.calls import CallResult, PlannedCall
from services.executor.control import RunControl
from services.executor.queue import RunQueue
from services.executor.runs import RunRecord
from services.executor.store import runs
from services.executor.store.persistence import RunRecorder
from services.executor.worker import RunWorker

PROJECT = "retries-proj"
OWNER = "worker-1"


class RepliesLost:
    """A pool whose next ``armed`` operations commit and then lose their reply."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool
        self.armed = 0
        self.lost = 0

    def _maybe_lose(self) -> None:
        if self.armed:
            self.armed -= 1
            self.lost += 1
            raise asyncpg.ConnectionDoesNotExistError(
                "connection was closed in the middle of operation"
            )

    async def fetch(self, *args: Any) -> list[asyncpg.Record]:
        rows = await self._pool.fetch(*args)
        self._maybe_lose()
        return rows

    async def expire_connections(self) -> None:
        await self._pool.expire_connections()

    async def fetchval(self, *args: Any) -> Any:
        return await self._pool.fetchval(*args)

    async def fetchrow(self, *args: Any) -> Any:
        return await self._pool.fetchrow(*args)

    @contextlib.asynccontextmanager
    async def acquire(self) -> AsyncIterator[asyncpg.Connection]:
        async with self._pool.acquire() as conn:
            yield conn
        # The caller's transaction committed when its block ended, before this point.
        self._maybe_lose()


async def running_run(pool: asyncpg.Pool) -> RunRecord:
    row = await f.insert_leased_run(
        pool, owner=OWNER, project_id=PROJECT, agent_name="retrier", step_count=0
    )
    return RunRecord.from_row(row)


def model_reply(step: int) -> tuple[ModelReply, list[PlannedCall]]:
    call = types.FunctionCall(id=f"c{step}", name="echo", args={"text": str(step)})
    reply = ModelReply(
        content=types.Content(
            role="model", parts=[types.Part(text=f"step {step}"), types.Part(function_call=call)]
        ),
        text=f"step {step}",
        function_calls=(call,),
        finish_reason="STOP",
        usage=TokenUsage(prompt_tokens=10, output_tokens=3, total_tokens=13),
        model_version=None,
        response_id=None,
        attempts=1,
    )
    planned = PlannedCall(
        tool_call_id=f"c{step}",
        tool_name="echo",
        arguments={"text": str(step)},
        source="builtin",
        call=call,
    )
    return reply, [planned]


async def counts(pool: asyncpg.Pool, run: RunRecord) -> dict[str, Any]:
    row = await pool.fetchrow(
        """
        SELECT r.step_count, r.tokens_in, r.last_event_seq, r.status,
               (SELECT count(*) FROM kb.agent_run_messages m WHERE m.run_id = r.id) AS messages,
               (SELECT count(*) FROM kb.agent_run_tool_calls t WHERE t.run_id = r.id) AS calls,
               (SELECT count(*) FROM kb.agent_run_events e WHERE e.run_id = r.id) AS events
        FROM kb.agent_runs r WHERE r.id = $1::uuid
        """,
        run.id,
    )
    return dict(row)


async def lock_waiter(watcher: asyncpg.Connection, *, other_than: int | None) -> int:
    """The backend waiting on a row lock (a new one, when ``other_than`` is given)."""
    return await wait_for(
        lambda: watcher.fetchval(
            "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND datname = current_database() AND pid IS DISTINCT FROM $1",
            other_than,
        ),
        "a write waiting on the run row",
        timeout_s=30,
    )


async def record_a_step(recorder: RunRecorder, step: int) -> None:
    reply, planned = model_reply(step)
    await recorder.record_model_reply(step=step, reply=reply, calls=planned)
    await recorder.record_tool_results(
        step=step,
        results=[CallResult(planned=p, status="completed", response={"ok": 1}) for p in planned],
    )


async def test_a_write_whose_connection_the_server_killed_is_retried_on_a_new_one(
    database_url: str,
) -> None:
    pool = await db.create_pool(database_url, min_size=1, max_size=1)
    try:
        run = await running_run(pool)
        tokens_before = run.tokens_in
        recorder = RunRecorder(pool, run, owner=OWNER)
        await recorder.record_start(
            system_prompt="",
            user_input=types.Content(role="user", parts=[types.Part(text="go")]),
            model_name="m",
            tool_names=["echo"],
            trace_id=None,
        )
        # The write waits on the run row (locked here), and its backend is killed mid-write
        # as at a server restart; the retry waits on a new backend until the lock goes.
        locker = await asyncpg.connect(database_url)
        watcher = await asyncpg.connect(database_url)
        try:
            lock = locker.transaction()
            await lock.start()
            await locker.execute(
                "SELECT 1 FROM kb.agent_runs WHERE id = $1::uuid FOR UPDATE", run.id
            )
            step = asyncio.ensure_future(record_a_step(recorder, 1))
            first = await lock_waiter(watcher, other_than=None)
            assert await watcher.fetchval("SELECT pg_terminate_backend($1)", first)
            second = await lock_waiter(watcher, other_than=first)
            await lock.commit()
            await asyncio.wait_for(step, 30)
        finally:
            await locker.close()
            await watcher.close()
        assert second != first
        assert await counts(pool, run) == {
            "step_count": 1,
            "tokens_in": tokens_before + 10,
            "last_event_seq": 5,
            "status": "running",
            "messages": 3,
            "calls": 1,
            "events": 5,
        }
        await assert_invariants(pool, project_id=PROJECT)
    finally:
        await pool.close()


async def test_a_step_committed_before_its_reply_was_lost_is_not_written_twice(
    db_pool: asyncpg.Pool,
) -> None:
    run = await running_run(db_pool)
    tokens_before = run.tokens_in
    lossy = RepliesLost(db_pool)
    recorder = RunRecorder(lossy, run, owner=OWNER)  # type: ignore[arg-type]
    await recorder.record_start(
        system_prompt="be brief",
        user_input=types.Content(role="user", parts=[types.Part(text="go")]),
        model_name="m",
        tool_names=["echo"],
        trace_id=None,
    )
    # Each write of the step commits, loses its reply, and is retried.
    lossy.armed = 1
    reply, planned = model_reply(1)
    await recorder.record_model_reply(step=1, reply=reply, calls=planned)
    lossy.armed = 1
    await recorder.record_tool_results(
        step=1,
        results=[CallResult(planned=p, status="completed", response={"ok": 1}) for p in planned],
    )
    assert lossy.lost == 2
    # Once each: the step counted once, one model and one tool message, one call row.
    assert await counts(db_pool, run) == {
        "step_count": 1,
        "tokens_in": tokens_before + 10,
        "last_event_seq": 5,
        "status": "running",
        "messages": 4,
        "calls": 1,
        "events": 5,
    }
    # The recorder goes on at the right message seq.
    await record_a_step(recorder, 2)
    seqs = await db_pool.fetch(
        "SELECT seq FROM kb.agent_run_messages WHERE run_id = $1::uuid ORDER BY seq", run.id
    )
    assert [r["seq"] for r in seqs] == list(range(6))

    # The end of the run, committed with its reply lost: the finished run, once.
    lossy.armed = 1
    finished = await recorder.record_finish(status="completed", reason="done", summary="ok")
    assert finished is not None
    assert finished.status == "completed"
    assert lossy.lost == 3
    assert (
        await db_pool.fetchval(
            "SELECT count(*) FROM kb.agent_run_events WHERE run_id = $1::uuid "
            "AND type = 'run_finished'",
            run.id,
        )
        == 1
    )
    await assert_invariants(db_pool, project_id=PROJECT)


async def test_a_note_committed_before_its_reply_was_lost_is_not_appended_twice(
    db_pool: asyncpg.Pool,
) -> None:
    run = await running_run(db_pool)
    lossy = RepliesLost(db_pool)
    recorder = RunRecorder(lossy, run, owner=OWNER)  # type: ignore[arg-type]
    note = ev.Safety(
        agent_name=run.agent_name, kind="doom_loop_warning", message="try another way", step=1
    )
    lossy.armed = 1
    await recorder.record_note(step=1, batch=[note])
    assert lossy.lost == 1
    assert await counts(db_pool, run) == {
        "step_count": 0,
        "tokens_in": run.tokens_in,
        "last_event_seq": 1,
        "status": "running",
        "messages": 0,
        "calls": 0,
        "events": 1,
    }


def test_what_counts_as_the_server_going_away() -> None:
    assert is_disconnect(asyncpg.ConnectionDoesNotExistError("closed in the middle"))
    assert is_disconnect(asyncpg.CannotConnectNowError("the database system is starting up"))
    assert is_disconnect(asyncpg.AdminShutdownError("terminating connection"))
    assert is_disconnect(ConnectionRefusedError(111, "Connection refused"))
    assert is_disconnect(asyncpg.InterfaceError("connection is closed"))
    assert is_disconnect(
        asyncpg.InternalClientError(
            "cannot switch to state 12; another operation (2) is in progress"
        )
    )
    assert not is_disconnect(asyncpg.InterfaceError("pool is closed"))
    assert not is_disconnect(asyncpg.UniqueViolationError("duplicate key"))
    assert not is_disconnect(ValueError("bad"))


class CutOnceExecutor:
    """A run executor whose first execution is cut by a lost connection (a read the loop
    does not retry); the next one ends the run."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool
        self.executions: list[tuple[str, bool]] = []

    async def execute(self, run: RunRecord, control: RunControl) -> RunRecord | None:
        self.executions.append((run.id, control.retry_outages))
        if len(self.executions) == 1:
            raise asyncpg.ConnectionDoesNotExistError(
                "connection was closed in the middle of operation"
            )
        async with self._pool.acquire() as conn:
            return await runs.finish(
                conn, run.project_id, run.id, status="completed", summary="again"
            )


async def test_a_run_cut_by_an_outage_is_run_again_by_its_own_worker(
    db_pool: asyncpg.Pool, database_url: str
) -> None:
    row = await f.insert_run(db_pool, project_id=PROJECT, agent_name="cut", status="queued")
    executor = CutOnceExecutor(db_pool)
    stopping = asyncio.Event()
    async with Listener(database_url) as listener:
        worker = RunWorker(
            queue=RunQueue(db_pool),
            executor=executor,
            listener=listener,
            owner="cut-worker",
            poll_s=0.1,
            heartbeat_s=0.5,
            drain_s=0.5,
        )
        running = asyncio.ensure_future(worker.run(stopping))
        try:
            await wait_for_query(
                db_pool,
                "SELECT status = 'completed' FROM kb.agent_runs WHERE id = $1::uuid",
                row["id"],
                what="the run to complete",
            )
        finally:
            stopping.set()
            await asyncio.wait_for(running, 10)
    # Twice by the same worker, each allowed to leave an outage to it; not failed.
    assert executor.executions == [(str(row["id"]), True), (str(row["id"]), True)]
    summary = await db_pool.fetchval(
        "SELECT summary FROM kb.agent_runs WHERE id = $1::uuid", row["id"]
    )
    assert summary == "again"


async def test_a_step_the_server_rolled_back_to_break_a_deadlock_runs_again(
    db_pool: asyncpg.Pool,
) -> None:
    # The step statement takes the run's row, then the project's usage rows; a transaction
    # that takes them the other way round closes a cycle, which the server breaks by rolling
    # back the first to wait: the step, which then runs again (nothing of it was stored).
    row = await f.insert_leased_run(db_pool, owner=OWNER, project_id=PROJECT, agent_name="d")
    run = RunRecord.from_row(row)
    recorder = RunRecorder(db_pool, run, owner=OWNER, next_message_seq=1)
    reply, planned = model_reply(1)
    await recorder.record_model_reply(step=1, reply=reply, calls=planned)  # the usage rows
    await recorder.record_tool_results(
        step=1, results=[CallResult(planned=planned[0], status="completed", response={"ok": 1})]
    )
    async with db_pool.acquire() as other:
        other_tx = other.transaction()
        await other_tx.start()
        await other.execute(
            "UPDATE kb.project_usage SET tokens = tokens WHERE project_id = $1", PROJECT
        )
        reply, planned = model_reply(2)
        step = asyncio.create_task(recorder.record_model_reply(step=2, reply=reply, calls=planned))
        # The step holds the run's row and waits for a usage row.
        await wait_for_query(
            db_pool,
            "SELECT count(*) > 0 FROM pg_locks WHERE NOT granted AND locktype = 'transactionid'",
            timeout_s=10,
        )
        await other.execute(
            "UPDATE kb.agent_runs SET lease_expires_at = lease_expires_at WHERE id = $1", row["id"]
        )
        await other_tx.commit()
        await asyncio.wait_for(step, 30)
    seqs = await db_pool.fetch(
        "SELECT seq FROM kb.agent_run_messages WHERE run_id = $1 ORDER BY seq", row["id"]
    )
    assert [r["seq"] for r in seqs] == [1, 2, 3]
