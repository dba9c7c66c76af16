"""Schedules on a real database: ticks once per due time, catch-up after downtime by policy,
pause and resume, and rows that cannot be ticked or fired do not block the others."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator

import asyncpg
import pytest

from agentfleet.errors import FailedPrecondition
from agentfleet.postgres.db import Listener
from agentfleet.settings.trigger_limits import TriggerLimits
from services.executor.registry.definitions import AgentDefinition, DefinitionRepository
from services.executor.triggers.consumer import TriggerConsumer
from services.executor.triggers.schedules import ScheduleRepository, ScheduleTicker

P = "alpha"


@pytest.fixture
async def consumer(database_url: str, db_pool: asyncpg.Pool) -> AsyncIterator[TriggerConsumer]:
    await DefinitionRepository(db_pool).upsert(P, AgentDefinition(name="reporter"))
    async with Listener(database_url) as listener:
        yield TriggerConsumer(db_pool, listener, TriggerLimits(), max_queued_per_project=100)


async def drain(c: TriggerConsumer) -> None:
    while await c.consume_one():
        pass


async def add(pool: asyncpg.Pool, name: str, catch_up: str, *, late_s: float) -> None:
    """An hourly schedule whose tick was due ``late_s`` ago (as after that much downtime)."""
    await ScheduleRepository(pool, TriggerLimits()).create(
        P,
        name=name,
        agent_name="reporter",
        cron="0 * * * *",
        time_zone="UTC",
        input_text=f"report {name}",
        catch_up=catch_up,
    )
    await pool.execute(
        "UPDATE kb.trigger_schedules SET next_fire_at = now() - make_interval(secs => $2)"
        " WHERE name = $1",
        name,
        late_s,
    )


async def test_on_time_ticks_fire_once_whatever_the_tickers(
    db_pool: asyncpg.Pool, consumer: TriggerConsumer
) -> None:
    await add(db_pool, "hourly", "skip", late_s=1)
    first, second = ScheduleTicker(db_pool), ScheduleTicker(db_pool)
    assert await first.tick() == 1
    assert await second.tick() == 0  # next_fire_at moved past now in the same transaction
    await drain(consumer)
    runs = await db_pool.fetch("SELECT input, started_by, trigger_origin FROM kb.agent_runs")
    assert [(r["input"], r["started_by"]) for r in runs] == [("report hourly", "schedule")]
    assert runs[0]["trigger_origin"]["trigger"] == "schedule:hourly"
    nxt = await db_pool.fetchval("SELECT next_fire_at FROM kb.trigger_schedules")
    assert nxt > dt.datetime.now(dt.UTC)
    assert (nxt.minute, nxt.second) == (0, 0)


async def test_catch_up_after_downtime_by_policy(
    db_pool: asyncpg.Pool, consumer: TriggerConsumer
) -> None:
    three_hours = 3 * 3600 + 60
    await add(db_pool, "skipper", "skip", late_s=three_hours)
    await add(db_pool, "catcher", "one", late_s=three_hours)
    assert await ScheduleTicker(db_pool).tick() == 2
    await drain(consumer)
    firings = {
        r["trigger"]: (r["outcome"], r["reason"])
        for r in await db_pool.fetch("SELECT trigger, outcome, reason FROM kb.trigger_firings")
    }
    assert firings["schedule:catcher"] == ("fired", None)
    outcome, reason = firings["schedule:skipper"]
    assert outcome == "skipped"
    assert reason.startswith("missed_ticks: 4 tick(s)")
    assert [r["input"] for r in await db_pool.fetch("SELECT input FROM kb.agent_runs")] == [
        "report catcher"
    ]


async def test_pause_and_resume(db_pool: asyncpg.Pool, consumer: TriggerConsumer) -> None:
    schedules = ScheduleRepository(db_pool, TriggerLimits())
    await add(db_pool, "hourly", "one", late_s=7200)
    paused = await schedules.set_paused(P, "hourly", True)
    assert paused.paused
    assert await ScheduleTicker(db_pool).tick() == 0
    resumed = await schedules.set_paused(P, "hourly", False)
    # Resumed, it fires at its next tick after now, not for the time it was paused.
    assert resumed.next_fire_at > dt.datetime.now(dt.UTC)
    assert await ScheduleTicker(db_pool).tick() == 0
    await schedules.delete(P, "hourly")
    assert await schedules.list(P) == []


async def test_a_row_that_cannot_be_ticked_is_paused_and_the_others_tick(
    db_pool: asyncpg.Pool, consumer: TriggerConsumer
) -> None:
    await add(db_pool, "fine", "skip", late_s=1)
    await add(db_pool, "broken", "skip", late_s=1)
    await db_pool.execute("UPDATE kb.trigger_schedules SET cron = 'nonsense' WHERE name = 'broken'")
    assert await ScheduleTicker(db_pool).tick() == 2
    states = dict(await db_pool.fetch("SELECT name, paused FROM kb.trigger_schedules"))
    assert states == {"fine": False, "broken": True}
    await drain(consumer)
    assert await db_pool.fetchval("SELECT count(*) FROM kb.agent_runs") == 1


async def test_an_event_that_cannot_be_fired_is_recorded_and_consumed(
    db_pool: asyncpg.Pool, consumer: TriggerConsumer
) -> None:
    # Hand-written ticks: one whose payload is no object (no rule foresaw it), then a sound one.
    for payload in ([1, 2], {"agent_name": "reporter", "schedule": "x", "input": "fine"}):
        await db_pool.execute(
            "INSERT INTO kb.trigger_outbox (project_id, kind, schedule_id, tick_at, payload)"
            " VALUES ($1, 'schedule', gen_random_uuid(), now(), $2::jsonb)",
            P,
            payload,
        )
    await drain(consumer)
    rows = await db_pool.fetch(
        "SELECT agent_name, outcome, reason FROM kb.trigger_firings ORDER BY outbox_id"
    )
    assert [(r["agent_name"], r["outcome"]) for r in rows] == [
        ("*", "skipped"),
        ("reporter", "fired"),
    ]
    assert rows[0]["reason"].startswith("error: AttributeError")
    unconsumed = "SELECT count(*) FROM kb.trigger_outbox WHERE consumed_at IS NULL"
    assert await db_pool.fetchval(unconsumed) == 0


async def test_a_definitions_config_schedule_is_its_schedule(
    db_pool: asyncpg.Pool, consumer: TriggerConsumer
) -> None:
    definitions = DefinitionRepository(db_pool)
    hourly = {"cron": "0 * * * *", "input": "hourly report", "time_zone": "Europe/Paris"}
    await definitions.upsert(P, AgentDefinition(name="reporter", config={"schedule": hourly}))
    row = await db_pool.fetchrow("SELECT * FROM kb.trigger_schedules")
    assert (row["name"], row["agent_name"], row["time_zone"]) == (
        "agent:reporter",
        "reporter",
        "Europe/Paris",
    )
    assert row["next_fire_at"] is None
    # The ticker computes its first tick after now and fires nothing for it.
    assert await ScheduleTicker(db_pool).tick() == 1
    first = await db_pool.fetchval("SELECT next_fire_at FROM kb.trigger_schedules")
    assert first > dt.datetime.now(dt.UTC)
    assert await db_pool.fetchval("SELECT count(*) FROM kb.trigger_outbox") == 0
    # Its own: not deleted by DeleteSchedule; changed and removed with the definition.
    with pytest.raises(FailedPrecondition):
        await ScheduleRepository(db_pool, TriggerLimits()).delete(P, "agent:reporter")
    await definitions.upsert(
        P, AgentDefinition(name="reporter", config={"schedule": {**hourly, "input": "new"}})
    )
    kept = await db_pool.fetchrow("SELECT input, next_fire_at FROM kb.trigger_schedules")
    assert (kept["input"], kept["next_fire_at"]) == ("new", first)  # same cron: same tick
    await definitions.upsert(P, AgentDefinition(name="reporter"))
    assert await db_pool.fetchval("SELECT count(*) FROM kb.trigger_schedules") == 0
    await definitions.upsert(P, AgentDefinition(name="reporter", config={"schedule": hourly}))
    await definitions.delete(P, "reporter")
    assert await db_pool.fetchval("SELECT count(*) FROM kb.trigger_schedules") == 0
