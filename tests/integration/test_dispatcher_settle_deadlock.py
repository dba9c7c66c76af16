"""The dispatcher's settle transaction rolled back by the server to break a real deadlock
runs again at once, within the same round: the task completes and its dependent is readied,
and no round fails.

The cycle is made on purpose: another transaction holds the dependent D's row; the settle of
X's completed run updates X and its session, then waits for D; the other transaction then
updates X. PostgreSQL rolls back the backend whose deadlock check finds the cycle, that is
the first whose ``deadlock_timeout`` runs out after both wait: the dispatcher's (500 ms; the
other's is 60 s). The check runs once per wait, so the settle's must not fire before the
other transaction waits too: 500 ms is ample for the test's 20 ms polling.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest_asyncio
import structlog

from agentfleet.postgres import db
from agentfleet.testing.dispatch import RunningRuns
from agentfleet.testing.waiting import wait_for, wait_for_query
from services.dispatcher.graphs.dag import NewTask
from services.dispatcher.graphs.graph_writes import GraphStore
from services.dispatcher.loop import Dispatcher
from services.dispatcher.selector import Selector
from services.dispatcher.timing import LoopTiming
from services.executor.registry.definitions import AgentDefinition, DefinitionRepository
from services.executor.registry.model_config import ModelConfig

PROJECT = "settle-deadlock"

# The settle statement's text, as pg_stat_activity shows the backend running it.
_SETTLE_WAITING = """
    SELECT pid FROM pg_stat_activity
    WHERE datname = current_database() AND wait_event_type = 'Lock'
      AND query LIKE '%WITH followed AS%' AND ($1::int IS NULL OR $1 = ANY(pg_blocking_pids(pid)))
"""


def _with_setting(url: str, name: str, value: str) -> str:
    parts = urlsplit(url)
    query = f"{parts.query}&{name}={value}" if parts.query else f"{name}={value}"
    return urlunsplit(parts._replace(query=query))


@pytest_asyncio.fixture
async def dispatcher_pool(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    # asyncpg sends unknown URL parameters as server settings of each connection.
    pool = await db.create_pool(
        _with_setting(database_url, "deadlock_timeout", "500ms"), min_size=1, max_size=4
    )
    yield pool
    await pool.close()


async def _task(pool: asyncpg.Pool, graph_id: str, key: str) -> asyncpg.Record:
    row = await pool.fetchrow(
        "SELECT id, status, (properties ->> 'ready') = 'true' AS ready, "
        "properties ->> 'session_id' AS session_id "
        "FROM kb.graph_objects WHERE project_id = $1 AND type = 'SpecTask' "
        "AND properties ->> 'graph_id' = $2 AND properties ->> 'key' = $3",
        PROJECT,
        graph_id,
        key,
    )
    assert row is not None
    return row


async def test_a_settle_the_server_rolled_back_to_break_a_deadlock_runs_again(
    db_pool: asyncpg.Pool, dispatcher_pool: asyncpg.Pool, database_url: str
) -> None:
    await DefinitionRepository(db_pool).upsert(
        PROJECT,
        AgentDefinition(name="w", system_prompt="w", model=ModelConfig(name="m"), is_default=True),
    )
    graph_id = await GraphStore(db_pool).create_graph(
        PROJECT,
        title="x blocks d",
        tasks=[NewTask(key="x", title="x"), NewTask(key="d", title="d")],
        edges=[("x", "d")],
        max_parallel=0,
        labels={},
        request_id="",
        validate_only=False,
    )
    runs = RunningRuns(db_pool)
    dispatcher = Dispatcher(
        dispatcher_pool,
        dsn=database_url,
        runs=runs,
        selector=Selector(dispatcher_pool),
        # No poll tick (its sweep would ready D too) and no heartbeat within the test.
        timing=LoopTiming(lease_s=60.0, poll_s=60.0),
    )
    stopping = asyncio.Event()
    with structlog.testing.capture_logs() as logs:

        def no_failed_round() -> None:
            failed = [e for e in logs if e.get("log_level") in ("error", "exception")]
            assert not failed, failed

        loop = asyncio.create_task(dispatcher.run(stopping))
        try:
            x = await _task(db_pool, graph_id, "x")
            d = await _task(db_pool, graph_id, "d")
            await wait_for_query(
                db_pool,
                "SELECT count(*) = 1 FROM kb.agent_runs WHERE task_id = $1 AND status = 'running'",
                x["id"],
                what="x's run started",
            )
            async with db_pool.acquire() as other:
                other_tx = other.transaction()
                await other_tx.start()
                await other.execute("SET LOCAL deadlock_timeout = '60s'")
                await other.execute(
                    "UPDATE kb.graph_objects SET version = version WHERE id = $1", d["id"]
                )
                other_pid = await other.fetchval("SELECT pg_backend_pid()")
                await runs.finish(str(x["id"]))
                # The settle has updated x and its session and waits for d.
                await wait_for(
                    lambda: db_pool.fetchval(_SETTLE_WAITING, other_pid),
                    "the settle waiting for d",
                )
                # x is held by the settle: this waits, closing the cycle, and goes on once
                # the server has rolled the settle back.
                async with asyncio.timeout(30):
                    await other.execute(
                        "UPDATE kb.graph_objects SET version = version WHERE id = $1", x["id"]
                    )

                # In the same round the settle runs again, and waits for x now.
                async def rerun_waiting() -> Any:
                    no_failed_round()
                    return await db_pool.fetchval(_SETTLE_WAITING, other_pid)

                await wait_for(rerun_waiting, "the settle run again, waiting for x")
                await other_tx.commit()
            await wait_for_query(
                db_pool,
                "SELECT status = 'completed' FROM kb.graph_objects WHERE id = $1",
                x["id"],
                what="x completed",
            )
            no_failed_round()
            x = await _task(db_pool, graph_id, "x")
            session_status = await db_pool.fetchval(
                "SELECT properties ->> 'status' FROM kb.graph_objects WHERE id = $1::uuid",
                x["session_id"],
            )
            assert session_status == "completed"
            # Readied by the settle itself (no sweep ran), and perhaps claimed since.
            d = await _task(db_pool, graph_id, "d")
            assert d["ready"] or d["status"] == "in_progress", dict(d)
        finally:
            stopping.set()
            await asyncio.wait_for(loop, 10)
    no_failed_round()
