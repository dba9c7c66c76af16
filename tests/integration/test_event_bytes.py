"""A step's tool arguments and results are stored once in its events' place (issue #36): the
step statements store TOOL_REQUEST and TOOL_RESPONSE without what the call row they write
holds, and every read (``kb.agent_run_events_shown``) shows the events as they were
recorded, also after an approver replaced the arguments, and after migrating down."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest_asyncio

from agentfleet import events as ev
from agentfleet.postgres import db
from agentfleet.postgres.migrate import migrate_down
from agentfleet.testing import factories as f
from agentfleet.testing.database import DatabaseFactory
from services.executor.calls import CallResult, PlannedCall
from services.executor.runs import RunRecord
from services.executor.store import tool_calls
from services.executor.store.persistence import RunRecorder
from tests.integration.test_step_writes import OWNER, PROJECT, _done, _reply

CALLS_ROWS_VERSION = 32
"""The last migration before the events' arguments and results moved to the call rows."""


@pytest_asyncio.fixture(loop_scope="session")
async def own_database(
    database_factory: DatabaseFactory,
) -> AsyncIterator[tuple[str, asyncpg.Pool]]:
    """A database of this test's own (the test migrates it down)."""
    url = await database_factory.create_database()
    pool = await db.create_pool(url, min_size=1, max_size=4)
    try:
        yield url, pool
    finally:
        await pool.close()
        await database_factory.drop_database(url)


async def _step(pool: asyncpg.Pool, step: int = 1) -> tuple[RunRecord, list[PlannedCall]]:
    row = await f.insert_leased_run(
        pool, owner=OWNER, project_id=PROJECT, agent_name="stepper", step_count=0
    )
    run = RunRecord.from_row(row)
    recorder = RunRecorder(pool, run, owner=OWNER, next_message_seq=1)
    reply, planned = _reply(step, calls=2)
    await recorder.record_model_reply(step=step, reply=reply, calls=planned)
    await recorder.record_tool_results(step=step, results=_done(planned))
    return run, planned


async def _stored(pool: asyncpg.Pool, run: RunRecord, kind: str) -> list[dict[str, object]]:
    rows = await pool.fetch(
        "SELECT payload FROM kb.agent_run_events WHERE run_id = $1::uuid AND type = $2"
        " ORDER BY seq",
        run.id,
        kind,
    )
    return [r["payload"] for r in rows]


async def _replayed(pool: asyncpg.Pool, run: RunRecord) -> list[ev.RunEvent]:
    stored = await ev.read_events(pool, project_id=PROJECT, run_id=run.id)
    return [p.event for p in stored if p.event.type in ("tool_request", "tool_response")]


def _recorded(planned: list[PlannedCall], results: list[CallResult]) -> list[ev.RunEvent]:
    """The events as the step recorded them: requests, then responses."""
    requests = [
        ev.ToolRequest(
            agent_name="stepper",
            tool_call_id=p.tool_call_id,
            tool_name=p.tool_name,
            arguments=p.arguments,
            step=1,
            source="builtin",
        )
        for p in planned
    ]
    responses = [
        ev.ToolResponse(
            agent_name="stepper",
            tool_call_id=r.planned.tool_call_id,
            tool_name=r.planned.tool_name,
            status=r.status,
            result=r.response,
            step=1,
        )
        for r in results
    ]
    return [*requests, *responses]


async def test_a_step_stores_its_calls_arguments_and_results_in_the_call_rows_only(
    db_pool: asyncpg.Pool,
) -> None:
    run, planned = await _step(db_pool)

    requests = await _stored(db_pool, run, "tool_request")
    responses = await _stored(db_pool, run, "tool_response")
    assert [("arguments" in p, p["tool_call_id"]) for p in requests] == [
        (False, "c1-0"),
        (False, "c1-1"),
    ]
    assert [("result" in p, p["status"]) for p in responses] == [
        (False, "completed"),
        (False, "completed"),
    ]
    assert await _replayed(db_pool, run) == _recorded(planned, _done(planned))


async def test_the_replay_shows_the_models_arguments_after_an_approver_replaced_them(
    db_pool: asyncpg.Pool,
) -> None:
    run, planned = await _step(db_pool)
    # What a decision with edited arguments leaves (tool_calls.decide keeps the model's as
    # original_input), on a row the step wrote.
    await db_pool.execute(
        "UPDATE kb.agent_run_tool_calls SET original_input = input, input = $3::jsonb"
        " WHERE run_id = $1::uuid AND tool_call_id = $2",
        run.id,
        "c1-0",
        {"text": "edited by the approver"},
    )
    assert await _replayed(db_pool, run) == _recorded(planned, _done(planned))


async def test_a_result_whose_row_the_step_did_not_finish_stays_in_its_event(
    db_pool: asyncpg.Pool,
) -> None:
    row = await f.insert_leased_run(
        db_pool, owner=OWNER, project_id=PROJECT, agent_name="stepper", step_count=0
    )
    run = RunRecord.from_row(row)
    recorder = RunRecorder(db_pool, run, owner=OWNER, next_message_seq=1)
    reply, planned = _reply(1, calls=2)
    await recorder.record_model_reply(step=1, reply=reply, calls=planned)
    # The first call was answered before the results (held and rejected): its row is no
    # longer started, so the results statement leaves it as it is.
    async with db_pool.acquire() as conn:
        await tool_calls.hold(conn, PROJECT, run.id, [("c1-0", {}, "reject", 60.0)])
    results = _done(planned)
    await recorder.record_tool_results(step=1, results=results)

    responses = await _stored(db_pool, run, "tool_response")
    assert [("result" in p, p["tool_call_id"]) for p in responses] == [
        (True, "c1-0"),
        (False, "c1-1"),
    ]
    assert await _replayed(db_pool, run) == _recorded(planned, results)


async def test_migrating_down_puts_the_arguments_and_results_back_in_the_events(
    own_database: tuple[str, asyncpg.Pool],
) -> None:
    url, pool = own_database
    run, planned = await _step(pool)
    before = [
        *(await _stored(pool, run, "tool_request")),
        *(await _stored(pool, run, "tool_response")),
    ]
    assert not any("arguments" in p or "result" in p for p in before)

    await migrate_down(url, target=CALLS_ROWS_VERSION)

    after = [
        *(await _stored(pool, run, "tool_request")),
        *(await _stored(pool, run, "tool_response")),
    ]
    recorded = [ev.event_payload(e) for e in _recorded(planned, _done(planned))]
    assert after == recorded
