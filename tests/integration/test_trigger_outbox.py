"""Graph-event triggers on a real database: the outbox trigger of migration 0027, the
consumer's firings, filters, chains and caps."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest

from agentfleet.graph import GraphRepository
from agentfleet.postgres.db import Listener
from agentfleet.settings.trigger_limits import TriggerLimits
from services.executor.registry.definitions import AgentDefinition, DefinitionRepository
from services.executor.registry.model_config import ModelConfig
from services.executor.triggers.consumer import TriggerConsumer

P = "alpha"


@pytest.fixture
async def listener(database_url: str) -> AsyncIterator[Listener]:
    async with Listener(database_url) as listening:
        yield listening


async def define(pool: asyncpg.Pool, name: str, trigger: str | None, **config: object) -> None:
    await DefinitionRepository(pool).upsert(
        P,
        AgentDefinition(
            name=name, model=ModelConfig(name="gemini-2.5-flash"), trigger=trigger, config=config
        ),
    )


def consumer(pool: asyncpg.Pool, listener: Listener, **limits: int) -> TriggerConsumer:
    return TriggerConsumer(pool, listener, TriggerLimits(**limits), max_queued_per_project=1000)


async def drain(c: TriggerConsumer) -> int:
    done = 0
    while await c.consume_one():
        done += 1
    return done


async def test_no_listener_no_outbox_row(db_pool: asyncpg.Pool) -> None:
    # A write no agent listens for costs an index probe and nothing else.
    await GraphRepository(db_pool).create_object(P, type="Document", properties={"title": "x"})
    assert await db_pool.fetchval("SELECT count(*) FROM kb.trigger_outbox") == 0


async def test_document_starts_the_summarizer_once(
    db_pool: asyncpg.Pool, listener: Listener
) -> None:
    await define(db_pool, "summarizer", "on_document_ingested")
    await define(db_pool, "bystander", None)
    doc = await GraphRepository(db_pool).create_object(
        P, type="Document", properties={"title": "Attention"}
    )
    c = consumer(db_pool, listener)
    assert await drain(c) == 1
    assert await drain(c) == 0
    runs = await db_pool.fetch("SELECT * FROM kb.agent_runs WHERE project_id = $1", P)
    assert len(runs) == 1
    run = runs[0]
    assert run["agent_name"] == "summarizer"
    assert run["started_by"] == "trigger"
    assert run["chain_depth"] == 1
    assert run["trigger_origin"]["object_id"] == doc.id
    assert run["trigger_origin"]["trigger"] == "on_document_ingested"
    assert '"Attention"' in run["input"]
    firing = await db_pool.fetchrow("SELECT * FROM kb.trigger_firings")
    assert (firing["outcome"], str(firing["run_id"])) == ("fired", str(run["id"]))


async def test_filter_and_template(db_pool: asyncpg.Pool, listener: Listener) -> None:
    await define(
        db_pool,
        "reviewer",
        "on_object_updated:Paper",
        trigger_filter={"status": "ready"},
        trigger_input="Review {{object.properties.title}} ({{object.id}})",
    )
    graph = GraphRepository(db_pool)
    paper = await graph.create_object(P, type="Paper", properties={"title": "T", "status": "new"})
    await graph.update_object(P, paper.id, set_properties={"note": "still new"})
    await graph.update_object(P, paper.id, set_properties={"status": "ready"})
    c = consumer(db_pool, listener)
    assert await drain(c) == 1  # only the update that matched the filter reached the outbox
    runs = await db_pool.fetch("SELECT input FROM kb.agent_runs")
    assert [r["input"] for r in runs] == [f"Review T ({paper.id})"]
    assert await db_pool.fetchval("SELECT count(*) FROM kb.trigger_firings") == 1


async def test_a_chain_stops_at_its_cap(db_pool: asyncpg.Pool, listener: Listener) -> None:
    await define(db_pool, "echo", "on_object_created:Note")
    c = consumer(db_pool, listener, max_chain_depth=3)
    source: str | None = None
    depths = []
    for _ in range(4):
        # Each triggered run writes the next Note itself (as its graph tools would).
        await GraphRepository(db_pool, source_run_id=source).create_object(
            P, type="Note", properties={}
        )
        await drain(c)
        firing = await db_pool.fetchrow(
            "SELECT * FROM kb.trigger_firings ORDER BY created_at DESC, id DESC LIMIT 1"
        )
        depths.append((firing["chain_depth"], firing["outcome"]))
        source = str(firing["run_id"]) if firing["run_id"] else None
    assert depths == [(1, "fired"), (2, "fired"), (3, "fired"), (4, "skipped")]
    skipped = await db_pool.fetchval(
        "SELECT reason FROM kb.trigger_firings WHERE outcome = 'skipped'"
    )
    assert skipped.startswith("chain_depth_cap:")
    assert await db_pool.fetchval("SELECT count(*) FROM kb.agent_runs") == 3


async def test_per_minute_cap_is_a_skipped_firing(
    db_pool: asyncpg.Pool, listener: Listener
) -> None:
    await define(db_pool, "busy", "on_object_created:Ping")
    graph = GraphRepository(db_pool)
    for _ in range(3):
        await graph.create_object(P, type="Ping", properties={})
    await drain(consumer(db_pool, listener, max_per_minute=2))
    rows = await db_pool.fetch("SELECT outcome, reason FROM kb.trigger_firings ORDER BY outbox_id")
    assert [r["outcome"] for r in rows] == ["fired", "fired", "skipped"]
    assert rows[2]["reason"].startswith("rate_cap:")


async def test_queued_cap_is_a_skipped_firing(db_pool: asyncpg.Pool, listener: Listener) -> None:
    await define(db_pool, "busy", "on_object_created:Ping")
    graph = GraphRepository(db_pool)
    for _ in range(2):
        await graph.create_object(P, type="Ping", properties={})
    await drain(consumer(db_pool, listener, max_queued_per_project=1))
    reasons = await db_pool.fetch("SELECT reason FROM kb.trigger_firings ORDER BY outbox_id")
    assert reasons[0]["reason"] is None
    assert reasons[1]["reason"].startswith("queued_cap:")


async def test_plain_sql_writes_trigger_too(db_pool: asyncpg.Pool, listener: Listener) -> None:
    await define(db_pool, "watcher", "on_object_created:Invoice")
    await db_pool.execute(
        "INSERT INTO kb.graph_objects (project_id, type, properties) VALUES ($1, 'Invoice', '{}')",
        P,
    )
    # Another project's write never reaches this project's agents.
    await db_pool.execute(
        "INSERT INTO kb.graph_objects (project_id, type, properties) "
        "VALUES ('beta', 'Invoice', '{}')"
    )
    await drain(consumer(db_pool, listener))
    assert await db_pool.fetchval("SELECT count(*) FROM kb.agent_runs") == 1


async def test_two_consumers_fire_each_event_once(
    db_pool: asyncpg.Pool, listener: Listener
) -> None:
    await define(db_pool, "summarizer", "on_document_ingested")
    graph = GraphRepository(db_pool)
    for i in range(30):
        await graph.create_object(P, type="Document", properties={"n": i})
    first, second = consumer(db_pool, listener), consumer(db_pool, listener)
    await asyncio.gather(drain(first), drain(second))
    assert await db_pool.fetchval("SELECT count(*) FROM kb.agent_runs") == 30
    assert (
        await db_pool.fetchval(
            "SELECT count(DISTINCT trigger_origin->>'object_id') FROM kb.agent_runs"
        )
        == 30
    )


async def test_listeners_past_the_per_event_cap_are_skipped_firings(
    db_pool: asyncpg.Pool, listener: Listener
) -> None:
    for name in ("a-first", "b-second", "c-third"):
        await define(db_pool, name, "on_object_created:Ping")
    await GraphRepository(db_pool).create_object(P, type="Ping", properties={})
    await drain(consumer(db_pool, listener, max_agents_per_event=2))
    rows = await db_pool.fetch(
        "SELECT agent_name, outcome, reason FROM kb.trigger_firings ORDER BY agent_name"
    )
    assert [(r["agent_name"], r["outcome"]) for r in rows] == [
        ("a-first", "fired"),
        ("b-second", "fired"),
        ("c-third", "skipped"),
    ]
    assert rows[2]["reason"].startswith("agent_cap:")
