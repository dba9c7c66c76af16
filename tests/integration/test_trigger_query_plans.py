"""The triggers' hot statements keep their indexes (EXPLAIN on analysed, realistically sized
tables; no planner setting forced): the consumers' claim, the graph trigger's listener probe,
the per-minute cap's count, ListTriggerFirings and ListRuns(started_by) pages, the history
prune's batches of old outbox events and firings, and the backlog gauges' sample."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest_asyncio

from agentfleet.queue_depth import TRIGGER_OUTBOX_BACKLOG_SQL
from agentfleet.testing.database import DatabaseFactory
from services.executor.triggers import store
from services.history import trigger_prune

ROWS = 30_000


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def filled(database_factory: DatabaseFactory) -> AsyncIterator[asyncpg.Pool]:
    async with database_factory.filled_pool(_fill) as pool:
        yield pool


async def _fill(conn: asyncpg.Connection) -> None:
    # 30k consumed events and a few waiting, in 50 projects; 30k firings in 5.
    await conn.execute(
        """
        INSERT INTO kb.trigger_outbox (project_id, kind, event_name, consumed_at, created_at)
        SELECT 'p' || (i % 50), 'event', 'e', CASE WHEN i % 3000 <> 0 THEN now() END,
               now() - make_interval(secs => $1::int - i)
        FROM generate_series(1, $1::int) AS i
        """,
        ROWS,
    )
    await conn.execute(
        """
        INSERT INTO kb.trigger_firings (project_id, outbox_id, agent_name, trigger, outcome,
                                        reason, created_at)
        SELECT 'p' || (i % 5), i, 'a', 'on_event:e',
               CASE WHEN i % 7 = 0 THEN 'skipped' ELSE 'fired' END,
               CASE WHEN i % 7 = 0 THEN 'rate_cap: x' END,
               now() - make_interval(secs => $1::int - i)
        FROM generate_series(1, $1::int) AS i
        """,
        ROWS,
    )
    await conn.execute(
        """
        INSERT INTO kb.agent_definitions (project_id, name, trigger)
        SELECT 'p' || (i % 50), 'agent-' || i,
               CASE WHEN i % 10 = 0 THEN 'on_object_created:T' || (i % 30) END
        FROM generate_series(1, 5000) AS i
        """
    )
    await conn.execute(
        """
        INSERT INTO kb.agent_runs (project_id, agent_name, status, started_by, chain_depth,
                                   created_at, completed_at)
        SELECT 'p' || (i % 50), 'a', 'completed',
               (ARRAY['rpc', 'trigger', 'schedule', 'event', 'parent', 'task'])[1 + i % 6],
               CASE WHEN i % 6 = 1 THEN 1 ELSE 0 END,
               now() - make_interval(secs => $1::int - i), now()
        FROM generate_series(1, $1::int) AS i
        """,
        ROWS,
    )
    await conn.execute("ANALYZE")


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", ()):
        yield from _nodes(child)


async def _uses(
    pool: asyncpg.Pool, table: str, index: str, sql: str, *args: object, sorts: bool = False
) -> None:
    """``sql`` reads ``table`` through ``index`` (a bitmap scan of it counts), never whole;
    and, unless ``sorts`` (an aggregate's ORDER BY over the few rows found), without a Sort."""
    result = await pool.fetchval(f"EXPLAIN (FORMAT JSON) {sql}", *args)
    nodes = list(_nodes(result[0]["Plan"]))
    described = [(n["Node Type"], n.get("Relation Name"), n.get("Index Name")) for n in nodes]
    scans = [n for n in nodes if n.get("Relation Name") == table]
    assert scans, described
    assert all(n["Node Type"] != "Seq Scan" for n in scans), described
    assert any(n.get("Index Name") == index for n in nodes), described
    if not sorts:
        assert all(n["Node Type"] not in ("Sort", "Incremental Sort") for n in nodes), described


async def test_the_claim_reads_only_unconsumed_events(filled: asyncpg.Pool) -> None:
    await _uses(filled, "trigger_outbox", "trigger_outbox_pending_idx", store._CLAIM)


async def test_the_graph_triggers_probe_uses_the_trigger_index(filled: asyncpg.Pool) -> None:
    await _uses(
        filled,
        "agent_definitions",
        "agent_definitions_trigger_idx",
        "SELECT array_agg(d.name ORDER BY d.name) FROM kb.agent_definitions d"
        " WHERE d.project_id = $1 AND d.trigger = ANY ($2::text[])",
        "p7",
        ["on_object_created:T3", "on_document_ingested"],
        sorts=True,
    )


async def test_the_per_minute_count_and_firing_pages_use_the_project_index(
    filled: asyncpg.Pool,
) -> None:
    await _uses(
        filled,
        "trigger_firings",
        "trigger_firings_project_created_idx",
        "SELECT count(*) FROM (SELECT 1 FROM kb.trigger_firings WHERE project_id = $1"
        " AND created_at >= $2 AND outcome = 'fired' LIMIT 60) recent",
        "p3",
        datetime.now(UTC),
    )
    await _uses(
        filled,
        "trigger_firings",
        "trigger_firings_project_created_idx",
        "SELECT * FROM kb.trigger_firings WHERE project_id = $1"
        " ORDER BY created_at DESC, id DESC LIMIT 51",
        "p3",
    )


async def test_list_runs_by_started_by_uses_its_index(filled: asyncpg.Pool) -> None:
    await _uses(
        filled,
        "agent_runs",
        "agent_runs_project_started_by_created_idx",
        "SELECT id FROM kb.agent_runs r WHERE r.project_id = $1 AND r.started_by = $2"
        " ORDER BY r.created_at DESC, r.id DESC LIMIT 51",
        "p7",
        "event",
    )


async def test_the_history_prunes_walk_their_indexes(filled: asyncpg.Pool) -> None:
    # Batches of consumed events, and of one project's old firings: the head of one index
    # range each, never the table (nor a sort of it).
    await _uses(
        filled,
        "trigger_outbox",
        "trigger_outbox_consumed_idx",
        trigger_prune.PRUNE_OUTBOX,
        24,
        trigger_prune.BATCH_ROWS,
    )
    await _uses(
        filled,
        "trigger_firings",
        "trigger_firings_project_created_idx",
        trigger_prune.PRUNE_FIRINGS,
        "p3",
        datetime.now(UTC),
        trigger_prune.BATCH_ROWS,
    )


async def test_the_backlog_gauges_read_the_pending_index(filled: asyncpg.Pool) -> None:
    await _uses(filled, "trigger_outbox", "trigger_outbox_pending_idx", TRIGGER_OUTBOX_BACKLOG_SQL)
