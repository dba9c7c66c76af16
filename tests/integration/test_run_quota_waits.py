"""A run's wait for its model's quota on a real PostgreSQL (issue 31): the reporter's start
and end are the run's MODEL_QUOTA_WAIT events and its waiting_for, one statement each;
nothing is written once the lease is lost; the run's end and a takeover clear a wait its
worker left; what the limiter reports is bounded before it is stored."""

from __future__ import annotations

import math

import asyncpg
import pytest

from agentfleet import events as ev
from agentfleet.llm import QuotaWait
from agentfleet.testing import factories as f
from services.executor.model.quota_waits import MAX_EXPECTED_WAIT_S, QuotaWaitReporter, quota_waits
from services.executor.runs import RunRecord
from services.executor.store import claim_sql, runs
from services.executor.store.persistence import RunRecorder

PROJECT = "quota-proj"
OWNER = "worker-1"
MODEL = "gemini-2.5-pro"


async def running_run(pool: asyncpg.Pool, *, lease: str = "1 hour") -> RunRecord:
    row = await f.insert_leased_run(
        pool, owner=OWNER, lease=lease, project_id=PROJECT, agent_name="waiter"
    )
    return RunRecord.from_row(row)


async def wait_columns(pool: asyncpg.Pool, run: RunRecord) -> asyncpg.Record:
    return await pool.fetchrow(
        "SELECT quota_wait, quota_wait_since FROM kb.agent_runs WHERE id = $1", run.id
    )


async def quota_events(pool: asyncpg.Pool, run: RunRecord) -> list[ev.ModelQuotaWait]:
    stored = await ev.read_events(pool, project_id=PROJECT, run_id=run.id)
    return [p.event for p in stored if isinstance(p.event, ev.ModelQuotaWait)]


async def test_a_wait_sets_then_clears_the_run_with_an_event_each(db_pool: asyncpg.Pool) -> None:
    run = await running_run(db_pool)
    recorder = RunRecorder(db_pool, run, owner=OWNER, next_message_seq=1)
    reporter = QuotaWaitReporter(recorder, step=3, model=MODEL)

    await reporter(QuotaWait(MODEL, "tokens_per_minute", 11.6, True))
    during = await wait_columns(db_pool, run)
    assert during["quota_wait"] == {
        "model": MODEL,
        "limit": "tokens_per_minute",
        "expected_wait_s": 11.6,
    }
    assert during["quota_wait_since"] is not None
    shown = ev.agent_run_to_proto(
        await db_pool.fetchrow("SELECT * FROM kb.agent_runs WHERE id = $1", run.id)
    )
    assert shown.waiting_for.message == f"waiting for model quota: {MODEL}, about 12 s"

    await reporter(QuotaWait(MODEL, "tokens_per_minute", 11.6, False))
    await reporter(QuotaWait(MODEL, "tokens_per_minute", 0, False))  # no wait open: ignored
    after = await wait_columns(db_pool, run)
    assert (after["quota_wait"], after["quota_wait_since"]) == (None, None)
    started, ended = await quota_events(db_pool, run)
    assert (started.waiting, started.step, started.expected_wait_s) == (True, 3, 11.6)
    assert started.message == f"waiting for model quota: {MODEL}, about 12 s"
    assert (ended.waiting, ended.limit) == (False, "tokens_per_minute")
    assert ended.waited_s >= 0
    assert (await runs.find(db_pool, PROJECT, run.id)).status == "running"  # type: ignore[union-attr]


async def test_a_new_estimate_of_a_wait_keeps_its_start(db_pool: asyncpg.Pool) -> None:
    run = await running_run(db_pool)
    reporter = QuotaWaitReporter(
        RunRecorder(db_pool, run, owner=OWNER, next_message_seq=1), step=1, model=MODEL
    )
    await reporter(QuotaWait(MODEL, "requests_per_minute", 30, True))
    first = await wait_columns(db_pool, run)
    await reporter(QuotaWait(MODEL, "requests_per_minute", 10, True))
    second = await wait_columns(db_pool, run)
    assert second["quota_wait"]["expected_wait_s"] == 10
    assert second["quota_wait_since"] == first["quota_wait_since"]
    await reporter.end()
    assert [(e.waiting, e.expected_wait_s) for e in await quota_events(db_pool, run)] == [
        (True, 30),
        (True, 10),
        (False, 10),
    ]


async def test_a_wait_the_client_left_open_is_ended_with_the_call(db_pool: asyncpg.Pool) -> None:
    run = await running_run(db_pool)
    recorder = RunRecorder(db_pool, run, owner=OWNER, next_message_seq=1)

    async def failing_call() -> None:
        async with quota_waits(recorder, step=1, model=MODEL) as on_wait:
            await on_wait(QuotaWait(MODEL, "concurrent_calls", 2, True))
            raise RuntimeError("model call failed")

    with pytest.raises(RuntimeError, match="model call failed"):
        await failing_call()
    assert (await wait_columns(db_pool, run))["quota_wait"] is None
    assert [e.waiting for e in await quota_events(db_pool, run)] == [True, False]


async def test_nothing_is_written_for_a_run_the_worker_no_longer_holds(
    db_pool: asyncpg.Pool,
) -> None:
    run = await running_run(db_pool)
    await db_pool.execute("UPDATE kb.agent_runs SET lease_owner = 'other' WHERE id = $1", run.id)
    recorder = RunRecorder(db_pool, run, owner=OWNER, next_message_seq=1)
    written = await recorder.record_quota_wait(
        ev.ModelQuotaWait(
            agent_name="waiter", waiting=True, model=MODEL, limit="rate_limit", expected_wait_s=1
        ),
        quota_wait={"model": MODEL, "limit": "rate_limit", "expected_wait_s": 1},
    )
    assert not written
    assert (await wait_columns(db_pool, run))["quota_wait"] is None
    assert await quota_events(db_pool, run) == []


async def test_the_runs_end_and_a_takeover_clear_a_wait_left_behind(
    db_pool: asyncpg.Pool,
) -> None:
    ended = await running_run(db_pool)
    await QuotaWaitReporter(
        RunRecorder(db_pool, ended, owner=OWNER, next_message_seq=1), step=1, model=MODEL
    )(QuotaWait(MODEL, "requests_per_minute", 5, True))
    finished = await runs.finish(db_pool, PROJECT, ended.id, status="failed", error_message="x")
    assert finished is not None
    assert (await wait_columns(db_pool, ended))["quota_wait"] is None

    # Its worker died mid-wait: the lease expires and another worker takes the run over.
    orphan = await running_run(db_pool)
    await QuotaWaitReporter(
        RunRecorder(db_pool, orphan, owner=OWNER, next_message_seq=1), step=1, model=MODEL
    )(QuotaWait(MODEL, "requests_per_minute", 5, True))
    await db_pool.execute(
        "UPDATE kb.agent_runs SET lease_expires_at = now() - interval '1 second' WHERE id = $1",
        orphan.id,
    )
    claimed = await claim_sql.claim_any(db_pool, "worker-2", 30.0, 10, 100)
    assert orphan.id in [c.run.id for c in claimed]
    assert (await wait_columns(db_pool, orphan))["quota_wait"] is None


@pytest.mark.parametrize(
    ("reported", "shown"),
    [
        (QuotaWait("projects/x/models/e", "tokens_per_day", 5, True), (MODEL, "tokens_per_day", 5)),
        (QuotaWait("m\x1b[2J", "Requests Per Minute", 5, True), (MODEL, "rate_limit", 5.0)),
        (
            QuotaWait(MODEL, "requests_per_minute", math.nan, True),
            (MODEL, "requests_per_minute", 0),
        ),
        (
            QuotaWait(MODEL, "rate_limit", math.inf, True),
            (MODEL, "rate_limit", MAX_EXPECTED_WAIT_S),
        ),
        (QuotaWait(MODEL, "rate_limit", -3, True), (MODEL, "rate_limit", 0)),
        (QuotaWait("gemini-2.5-flash", "l" * 65, 1, True), ("gemini-2.5-flash", "rate_limit", 1)),
    ],
    ids=["resource-path", "control-chars", "nan", "inf", "negative", "long-limit"],
)
async def test_what_the_limiter_reports_is_bounded_before_it_is_stored(
    db_pool: asyncpg.Pool, reported: QuotaWait, shown: tuple[str, str, float]
) -> None:
    run = await running_run(db_pool)
    reporter = QuotaWaitReporter(
        RunRecorder(db_pool, run, owner=OWNER, next_message_seq=1), step=1, model=MODEL
    )
    await reporter(reported)
    stored = (await wait_columns(db_pool, run))["quota_wait"]
    assert (stored["model"], stored["limit"], stored["expected_wait_s"]) == shown
    [event] = await quota_events(db_pool, run)
    assert (event.model, event.limit, event.expected_wait_s) == shown
    await reporter.end()
