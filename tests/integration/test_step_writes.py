"""The step's two writes on a real PostgreSQL (issue #4): one statement each, numbering
events from the run row's ``last_event_seq`` in the same series as every other appender,
NOTIFY (run_id, last seq) at commit, and nothing written for a lost lease or a foreign
project."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
import pytest_asyncio
from google.genai import types

from agentfleet import events as ev
from agentfleet.errors import NotFound
from agentfleet.llm import ModelReply, TokenUsage
from agentfleet.postgres import db
from agentfleet.postgres.db import Listener, Notification
from agentfleet.postgres.migrate import migrate_up
from agentfleet.testing import factories as f
from agentfleet.testing.database import DatabaseFactory
from services.executor.calls import CallResult, PlannedCall
from services.executor.runs import RunRecord
from services.executor.store.persistence import LeaseLost, RunRecorder

PROJECT = "steps-proj"
OWNER = "worker-1"


class StatementLog:
    """Every statement pooled connections send (the pool releases them as production's
    does, with no reset query)."""

    def __init__(self) -> None:
        self.queries: list[str] = []

    def __call__(self, record: Any) -> None:
        self.queries.append(record.query)

    async def init(self, conn: asyncpg.Connection) -> None:
        await db._init_connection(conn)
        conn.add_query_logger(self)


@pytest_asyncio.fixture(loop_scope="session")
async def logged_pool(database_url: str) -> AsyncIterator[tuple[asyncpg.Pool, StatementLog]]:
    log = StatementLog()
    # One connection, so its statement cache is warm after a first step.
    pool = await asyncpg.create_pool(
        database_url, min_size=1, max_size=1, init=log.init, reset=db._keep_session
    )
    try:
        yield pool, log
    finally:
        await pool.close()


async def _running_run(pool: asyncpg.Pool) -> RunRecord:
    row = await f.insert_leased_run(
        pool, owner=OWNER, project_id=PROJECT, agent_name="stepper", step_count=0
    )
    return RunRecord.from_row(row)


def _reply(step: int, calls: int) -> tuple[ModelReply, list[PlannedCall]]:
    function_calls = [
        types.FunctionCall(id=f"c{step}-{i}", name="echo", args={"text": f"{step}.{i}"})
        for i in range(calls)
    ]
    content = types.Content(
        role="model",
        parts=[
            types.Part(text=f"thinking {step}"),
            *(types.Part(function_call=c) for c in function_calls),
        ],
    )
    reply = ModelReply(
        content=content,
        text=f"thinking {step}",
        function_calls=tuple(function_calls),
        finish_reason="STOP",
        usage=TokenUsage(prompt_tokens=10, output_tokens=3, total_tokens=13),
        model_version=None,
        response_id=None,
        attempts=1,
    )
    planned = [
        PlannedCall(
            tool_call_id=c.id or "",
            tool_name="echo",
            arguments=dict(c.args or {}),
            source="builtin",
            call=c,
        )
        for c in function_calls
    ]
    return reply, planned


def _done(planned: list[PlannedCall]) -> list[CallResult]:
    return [
        CallResult(planned=p, status="completed", response={"output": p.arguments}) for p in planned
    ]


async def _event_seqs(pool: asyncpg.Pool, run: RunRecord) -> list[int]:
    stored = await ev.read_events(pool, project_id=PROJECT, run_id=run.id, limit=1000)
    return [p.seq for p in stored]


async def _last_event_seq(pool: asyncpg.Pool, run: RunRecord) -> int:
    return await pool.fetchval(
        "SELECT last_event_seq FROM kb.agent_runs WHERE id = $1::uuid", run.id
    )


async def test_each_step_write_is_one_statement_and_notifies_its_last_seq(
    logged_pool: tuple[asyncpg.Pool, StatementLog], db_pool: asyncpg.Pool, database_url: str
) -> None:
    pool, log = logged_pool
    run = await _running_run(pool)
    tokens_before = (run.tokens_in, run.tokens_out)
    # The notifications go on another pool: the step's own path is the one statement.
    notifier = ev.RunEventNotifier(db_pool)
    recorder = RunRecorder(pool, run, owner=OWNER, next_message_seq=1, notifier=notifier)
    # The first step prepares the statements (asyncpg caches them per connection).
    reply, planned = _reply(1, calls=2)
    await recorder.record_model_reply(step=1, reply=reply, calls=planned)
    await recorder.record_tool_results(step=1, results=_done(planned))
    reply, planned = _reply(2, calls=2)
    # Step 1's notifications sent before listening: the first one heard is step 2's.
    await notifier.flush()
    received: asyncio.Queue[Notification] = asyncio.Queue()
    async with Listener(database_url) as listener:
        await listener.subscribe(ev.CHANNEL, received)
        log.queries.clear()
        await recorder.record_model_reply(step=2, reply=reply, calls=planned)
        assert len(log.queries) == 1, log.queries
        note = await asyncio.wait_for(received.get(), 5)
        assert ev.parse_notification(note.payload) == (run.id, 8)  # MODEL_TEXT + 2 requests
        statuses = await pool.fetch(
            "SELECT status FROM kb.agent_run_tool_calls WHERE run_id = $1::uuid"
            " AND step_number = 2",
            run.id,
        )
        assert [r["status"] for r in statuses] == ["started", "started"]

        log.queries.clear()
        await recorder.record_tool_results(step=2, results=_done(planned))
        assert len(log.queries) == 1, log.queries
        note = await asyncio.wait_for(received.get(), 5)
        assert ev.parse_notification(note.payload) == (run.id, 10)
    assert await _event_seqs(pool, run) == list(range(1, 11))
    assert await _last_event_seq(pool, run) == 10
    row = await pool.fetchrow(
        "SELECT step_count, total_steps, tokens_in, tokens_out FROM kb.agent_runs"
        " WHERE id = $1::uuid",
        run.id,
    )
    assert tuple(row) == (2, 2, tokens_before[0] + 20, tokens_before[1] + 6)
    statuses = await pool.fetch(
        "SELECT status, output FROM kb.agent_run_tool_calls WHERE run_id = $1::uuid"
        " ORDER BY tool_call_id",
        run.id,
    )
    assert [(r["status"], r["output"]) for r in statuses] == [
        ("completed", {"output": {"text": "1.0"}}),
        ("completed", {"output": {"text": "1.1"}}),
        ("completed", {"output": {"text": "2.0"}}),
        ("completed", {"output": {"text": "2.1"}}),
    ]
    roles = await pool.fetch(
        "SELECT seq, role FROM kb.agent_run_messages WHERE run_id = $1::uuid ORDER BY seq",
        run.id,
    )
    assert [(r["seq"], r["role"]) for r in roles] == [
        (1, "model"),
        (2, "tool"),
        (3, "model"),
        (4, "tool"),
    ]


async def test_steps_and_other_appenders_share_one_gapless_series(db_pool: asyncpg.Pool) -> None:
    run = await _running_run(db_pool)
    recorder = RunRecorder(db_pool, run, owner=OWNER, next_message_seq=1)

    async def steps() -> None:
        for step in range(1, 11):
            reply, planned = _reply(step, calls=2)
            await recorder.record_model_reply(step=step, reply=reply, calls=planned)
            await recorder.record_tool_results(step=step, results=_done(planned))

    async def other_appender(i: int) -> None:
        # What a child's CHILD_RUN_FINISHED or a control request does: a transaction of its
        # own that appends to the same run while the steps go on.
        for k in range(5):
            async with db_pool.acquire() as conn, conn.transaction():
                await ev.append_events(
                    conn,
                    project_id=PROJECT,
                    run_id=run.id,
                    root_run_id=run.root_run_id,
                    events=[ev.ModelText(agent_name="other", text=f"{i}.{k}", step=0)] * 2,
                )

    await asyncio.gather(steps(), *(other_appender(i) for i in range(4)))
    total = 10 * 5 + 4 * 5 * 2  # a step: MODEL_TEXT, 2 requests, 2 responses
    assert await _event_seqs(db_pool, run) == list(range(1, total + 1))
    assert await _last_event_seq(db_pool, run) == total


async def test_a_lost_lease_writes_nothing(db_pool: asyncpg.Pool) -> None:
    run = await _running_run(db_pool)
    row = run.as_mapping()
    await f.append(db_pool, run=row, events=f.start_events(row))
    await db_pool.execute(
        "UPDATE kb.agent_runs SET lease_owner = 'worker-2' WHERE id = $1::uuid", run.id
    )
    recorder = RunRecorder(db_pool, run, owner=OWNER, next_message_seq=1)
    reply, planned = _reply(1, calls=1)
    with pytest.raises(LeaseLost):
        await recorder.record_model_reply(step=1, reply=reply, calls=planned)
    assert await _event_seqs(db_pool, run) == [1, 2, 3]
    assert await _last_event_seq(db_pool, run) == 3
    assert (
        await db_pool.fetchval(
            "SELECT count(*) FROM kb.agent_run_messages WHERE run_id = $1::uuid", run.id
        )
        == 0
    )
    assert (
        await db_pool.fetchval(
            "SELECT count(*) FROM kb.agent_run_tool_calls WHERE run_id = $1::uuid", run.id
        )
        == 0
    )
    assert recorder.open_calls == []


async def test_results_for_a_run_outside_the_project_write_nothing(db_pool: asyncpg.Pool) -> None:
    run = await _running_run(db_pool)
    recorder = RunRecorder(db_pool, run, owner=OWNER, next_message_seq=1)
    reply, planned = _reply(1, calls=1)
    await recorder.record_model_reply(step=1, reply=reply, calls=planned)
    stranger = RunRecorder(
        db_pool,
        RunRecord.from_row({**run.as_mapping(), "project_id": "someone-else"}),
        owner=OWNER,
        next_message_seq=2,
    )
    with pytest.raises(NotFound):
        await stranger.record_tool_results(step=1, results=_done(planned))
    assert (
        await db_pool.fetchval(
            "SELECT status FROM kb.agent_run_tool_calls WHERE run_id = $1::uuid", run.id
        )
        == "started"
    )
    assert (
        await db_pool.fetchval(
            "SELECT count(*) FROM kb.agent_run_messages WHERE run_id = $1::uuid", run.id
        )
        == 1
    )
    assert await _event_seqs(db_pool, run) == [1, 2]


async def test_migration_counts_the_events_runs_already_have(
    database_factory: DatabaseFactory,
) -> None:
    url = await database_factory.create_database(migrated=False)
    try:
        await migrate_up(url, target=9)
        conn = await db.connect(url)
        try:
            with_events = await f.insert_run(conn, project_id=PROJECT, agent_name="old")
            without = await f.insert_run(conn, project_id=PROJECT, agent_name="new")
            await conn.execute(
                "INSERT INTO kb.agent_run_events (run_id, seq, root_run_id, type, agent_name)"
                " SELECT $1, s, $1, 'model_text', 'old' FROM generate_series(1, 7) s",
                with_events["id"],
            )
            await migrate_up(conn)
            counted = await conn.fetch(
                "SELECT id, last_event_seq FROM kb.agent_runs ORDER BY agent_name"
            )
            assert [(r["id"], r["last_event_seq"]) for r in counted] == [
                (without["id"], 0),
                (with_events["id"], 7),
            ]
            appended = await ev.append_events(
                conn,
                project_id=PROJECT,
                run_id=str(with_events["id"]),
                root_run_id=str(with_events["id"]),
                events=[ev.ModelText(agent_name="old", text="next", step=1)],
            )
            assert [p.seq for p in appended] == [8]
        finally:
            await conn.close()
    finally:
        await database_factory.drop_database(url)


async def test_a_write_whose_caller_is_cancelled_still_commits_and_keeps_state(
    db_pool: asyncpg.Pool,
) -> None:
    # The recorder shields its own writes (issue #17): no caller wraps them, yet a run
    # cancelled mid-write keeps its rows and the recorder's state in agreement.
    run = await _running_run(db_pool)
    recorder = RunRecorder(db_pool, run, owner=OWNER, next_message_seq=1)
    reply, planned = _reply(1, calls=2)
    write = asyncio.create_task(recorder.record_model_reply(step=1, reply=reply, calls=planned))
    await asyncio.sleep(0)  # one turn: the write has begun and waits on the database
    assert not write.done()
    write.cancel()
    with pytest.raises(asyncio.CancelledError):
        await write
    assert await _event_seqs(db_pool, run) == [1, 2, 3]  # MODEL_TEXT, two TOOL_REQUESTs
    calls = await db_pool.fetch(
        "SELECT tool_call_id, status FROM kb.agent_run_tool_calls WHERE run_id = $1::uuid"
        " ORDER BY tool_call_id",
        run.id,
    )
    assert [(c["tool_call_id"], c["status"]) for c in calls] == [
        ("c1-0", "started"),
        ("c1-1", "started"),
    ]
    assert recorder.open_calls == planned
    assert recorder.run.step_count == 1
    # The next write continues the message series where the cancelled one left it.
    await recorder.record_tool_results(step=1, results=_done(planned))
    seqs = await db_pool.fetch(
        "SELECT seq, role FROM kb.agent_run_messages WHERE run_id = $1::uuid ORDER BY seq",
        run.id,
    )
    assert [(r["seq"], r["role"]) for r in seqs] == [(1, "model"), (2, "tool")]
