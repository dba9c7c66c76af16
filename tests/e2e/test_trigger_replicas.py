"""Triggers across executor replicas on real processes (issue 32): two executors consume
one outbox, one of them is SIGKILLed mid-way, and every event still fires exactly once; a
schedule at the minimum interval fires once per tick whatever the number of replicas."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from agentfleet.gemini_stub import GeminiStub, Reply, Script
from agentfleet.testing.services import ProcessStack
from agentfleet.testing.waiting import wait_for, wait_for_query
from services.executor.registry.definitions import AgentDefinition, DefinitionRepository
from services.executor.registry.model_config import ModelConfig
from tests.e2e.lone_executor import NoTools, serve_toolpool, start_executor

PROJECT = "reacting"
EVENTS = 150
UNCAPPED = {
    "AGENTFLEET_TRIGGER_MAX_PER_MINUTE": "100000",
    "AGENTFLEET_TRIGGER_MAX_QUEUED_PER_PROJECT": "100000",
    "AGENTFLEET_MAX_QUEUED_PER_PROJECT": "100000",
    "AGENTFLEET_SCHEDULE_MIN_INTERVAL_S": "1",
}


@pytest.fixture
async def toolpool_addr() -> AsyncIterator[str]:
    async with serve_toolpool(NoTools()) as addr:
        yield addr


async def two_executors(
    database_url: str, stub: GeminiStub, toolpool_addr: str, tmp_path: Path
) -> tuple[ProcessStack, ProcessStack]:
    first, second = await asyncio.gather(
        start_executor(database_url, tmp_path / "a", stub, toolpool_addr, **UNCAPPED),
        start_executor(database_url, tmp_path / "b", stub, toolpool_addr, **UNCAPPED),
    )
    return first, second


async def define(pool: asyncpg.Pool, name: str, trigger: str | None) -> None:
    await DefinitionRepository(pool).upsert(
        PROJECT,
        AgentDefinition(
            name=name, system_prompt="react", model=ModelConfig(name="gemini-e2e"), trigger=trigger
        ),
    )


async def test_sigkill_of_one_consumer_fires_each_event_once(
    database_url: str,
    db_pool: asyncpg.Pool,
    gemini_stub: GeminiStub,
    toolpool_addr: str,
    tmp_path: Path,
) -> None:
    gemini_stub.add_script(Script(name="answer", policy=lambda request: Reply(text="seen")))
    await define(db_pool, "pinger", "on_object_created:Ping")
    first, second = await two_executors(database_url, gemini_stub, toolpool_addr, tmp_path)
    try:
        # Another service's plain SQL: the outbox trigger covers it like the graph tools.
        await db_pool.execute(
            "INSERT INTO kb.graph_objects (project_id, type, properties) "
            "SELECT $1, 'Ping', jsonb_build_object('n', n) FROM generate_series(1, $2) n",
            PROJECT,
            EVENTS,
        )
        await wait_for_query(db_pool, "SELECT count(*) >= 20 FROM kb.trigger_firings", timeout_s=60)
        victim = first.processes["executor"]
        victim.kill()  # SIGKILL, mid-way through the outbox
        await victim.wait()
        await wait_for_query(
            db_pool,
            "SELECT count(*) = 0 FROM kb.trigger_outbox WHERE consumed_at IS NULL",
            timeout_s=90,
            what="the surviving executor consumed every event",
        )
        counts = await db_pool.fetchrow(
            """
            SELECT count(*) AS firings, count(DISTINCT f.object_id) AS objects,
                   count(*) FILTER (WHERE f.outcome = 'fired') AS fired
            FROM kb.trigger_firings f
            """
        )
        assert dict(counts) == {"firings": EVENTS, "objects": EVENTS, "fired": EVENTS}
        per_object = await db_pool.fetch(
            """
            SELECT o.id, count(r.id) AS runs FROM kb.graph_objects o
            LEFT JOIN kb.agent_runs r ON r.trigger_origin ->> 'object_id' = o.id::text
            WHERE o.project_id = $1 GROUP BY o.id
            """,
            PROJECT,
        )
        assert len(per_object) == EVENTS
        assert {row["runs"] for row in per_object} == {1}
        assert (
            await db_pool.fetchval(
                "SELECT count(*) FROM kb.agent_runs"
                " WHERE started_by = 'trigger' AND chain_depth = 1"
            )
            == EVENTS
        )
    finally:
        await first.stop(grace_s=2)
        await second.stop(grace_s=5)


async def test_a_schedule_fires_once_per_tick_with_two_replicas(
    database_url: str,
    db_pool: asyncpg.Pool,
    gemini_stub: GeminiStub,
    toolpool_addr: str,
    tmp_path: Path,
) -> None:
    gemini_stub.add_script(Script(name="answer", policy=lambda request: Reply(text="tick")))
    await define(db_pool, "ticker", None)
    first, second = await two_executors(database_url, gemini_stub, toolpool_addr, tmp_path)
    try:
        # Every second (croniter's sixth field), at the minimum interval these executors allow.
        await db_pool.execute(
            """
            INSERT INTO kb.trigger_schedules (project_id, name, agent_name, cron, input,
                                              next_fire_at)
            VALUES ($1, 'every-second', 'ticker', '* * * * * *', 'tick', now())
            """,
            PROJECT,
        )
        await wait_for_query(
            db_pool,
            "SELECT count(*) >= 4 FROM kb.agent_runs WHERE started_by = 'schedule'",
            timeout_s=60,
        )
        await db_pool.execute("UPDATE kb.trigger_schedules SET paused = true")
        await wait_for_query(
            db_pool, "SELECT count(*) = 0 FROM kb.trigger_outbox WHERE consumed_at IS NULL"
        )
        ticks = await db_pool.fetch(
            """
            SELECT o.tick_at, count(r.id) AS runs FROM kb.trigger_outbox o
            LEFT JOIN kb.agent_runs r ON r.trigger_origin ->> 'outbox_id' = o.id::text
            WHERE o.kind = 'schedule' GROUP BY o.tick_at ORDER BY o.tick_at
            """
        )
        assert len(ticks) >= 4
        assert {row["runs"] for row in ticks} == {1}, ticks
        stamps = [row["tick_at"] for row in ticks]
        assert len(set(stamps)) == len(stamps)
    finally:
        await asyncio.gather(first.stop(grace_s=5), second.stop(grace_s=5))


async def test_schedules_catch_up_by_policy_after_every_executor_stopped(
    database_url: str,
    db_pool: asyncpg.Pool,
    gemini_stub: GeminiStub,
    toolpool_addr: str,
    tmp_path: Path,
) -> None:
    gemini_stub.add_script(Script(name="answer", policy=lambda request: Reply(text="tick")))
    await define(db_pool, "ticker", None)
    first, second = await two_executors(database_url, gemini_stub, toolpool_addr, tmp_path)
    stacks = [first, second]
    try:
        await db_pool.execute(
            """
            INSERT INTO kb.trigger_schedules (project_id, name, agent_name, cron, input, catch_up,
                                              next_fire_at)
            VALUES ($1, 'skipper', 'ticker', '* * * * * *', 'skip', 'skip', now()),
                   ($1, 'catcher', 'ticker', '* * * * * *', 'one', 'one', now())
            """,
            PROJECT,
        )
        fired = "SELECT count(DISTINCT trigger) = 2 FROM kb.trigger_firings WHERE outcome = 'fired'"
        await wait_for_query(db_pool, fired, timeout_s=60)
        await asyncio.gather(first.stop(grace_s=5), second.stop(grace_s=5))
        due = dict(await db_pool.fetch("SELECT name, next_fire_at FROM kb.trigger_schedules"))
        # Downtime: every executor is stopped until the due ticks are well past late.
        await wait_for_query(
            db_pool,
            "SELECT now() > $1::timestamptz + interval '7 seconds'",
            max(due.values()),
            timeout_s=30,
        )
        again = await start_executor(
            database_url, tmp_path / "c", gemini_stub, toolpool_addr, **UNCAPPED
        )
        stacks.append(again)
        late = """
            SELECT f.outcome, f.reason FROM kb.trigger_firings f
            JOIN kb.trigger_outbox o ON o.id = f.outbox_id
            JOIN kb.trigger_schedules s ON s.id = o.schedule_id
            WHERE s.name = $1 AND o.tick_at = $2
        """
        skipped = await wait_for(
            lambda: db_pool.fetchrow(late, "skipper", due["skipper"]), "skipper's late tick"
        )
        caught = await wait_for(
            lambda: db_pool.fetchrow(late, "catcher", due["catcher"]), "catcher's late tick"
        )
        assert skipped["outcome"] == "skipped"
        assert skipped["reason"].startswith("missed_ticks:")
        assert (caught["outcome"], caught["reason"]) == ("fired", None)
        # One run for the whole downtime, then ticks as usual again.
        late_ticks = await db_pool.fetchval(
            "SELECT count(*) FROM kb.trigger_outbox o JOIN kb.trigger_schedules s"
            " ON s.id = o.schedule_id WHERE s.name = 'catcher' AND o.tick_at > $1"
            " AND o.tick_at < now() - interval '7 seconds'",
            due["catcher"],
        )
        assert late_ticks == 0
    finally:
        await asyncio.gather(*(stack.stop(grace_s=5) for stack in stacks))
