"""A followed run that ends wakes the dispatcher through the process's run watcher
(:meth:`agentfleet.runs.run_watch.RunWatch.follow`), not at its next poll: with a poll of an hour,
the task completes as soon as its run records its end.

The run is finished only after the dispatcher has read it once as running (its settle
statement, seen by a query logger on the dispatcher's pool), so that read cannot be what
completes the task.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest_asyncio

from agentfleet.testing import factories as f
from agentfleet.testing.checks.statements import StatementCounter
from agentfleet.testing.waiting import wait_for, wait_for_query
from services.dispatcher.loop import Dispatcher
from services.dispatcher.runs import RunRequest
from services.dispatcher.selector import Selector
from services.dispatcher.timing import LoopTiming
from tests.integration.one_task_graph import one_task

PROJECT = "run-wake"
AN_HOUR_S = 3600.0


class LaterRuns:
    """The dispatcher's RunControl: a triggered run stays running until the test ends it."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool
        self.started: list[dict[str, Any]] = []

    async def trigger(self, run: RunRequest) -> str:
        row = await f.insert_run(
            self._pool,
            project_id=run.project_id,
            agent_name=run.agent_name,
            status="running",
            input=run.input,
        )
        self.started.append(row)
        return str(row["id"])

    async def cancel(self, project_id: str, run_id: str, reason: str) -> None:
        return None

    async def resume(self, project_id: str, run_id: str, request_id: str) -> str | None:
        return "not supported"


class SettleReads(StatementCounter):
    """Also counts the dispatcher's settle statements (``transitions.settle``)."""

    def __init__(self) -> None:
        super().__init__()
        self.settles = 0

    def _log(self, record: Any) -> None:
        super()._log(record)
        if "WITH followed AS" in record.query:
            self.settles += 1


@pytest_asyncio.fixture
async def task_id(db_pool: asyncpg.Pool) -> str:
    return await one_task(db_pool, PROJECT)


@pytest_asyncio.fixture
async def reads(database_url: str) -> AsyncIterator[tuple[SettleReads, asyncpg.Pool]]:
    counter = SettleReads()
    pool = await counter.pool(database_url)
    yield counter, pool
    await pool.close()


async def test_a_run_that_ends_wakes_the_dispatcher_before_its_poll(
    db_pool: asyncpg.Pool,
    database_url: str,
    task_id: str,
    reads: tuple[SettleReads, asyncpg.Pool],
) -> None:
    counter, dispatcher_pool = reads
    runs = LaterRuns(db_pool)
    dispatcher = Dispatcher(
        dispatcher_pool,
        dsn=database_url,
        runs=runs,
        selector=Selector(dispatcher_pool),
        timing=LoopTiming(lease_s=30.0, poll_s=AN_HOUR_S),
    )
    stopping = asyncio.Event()
    loop = asyncio.create_task(dispatcher.run(stopping))
    try:
        # Started, followed, and read once while running; after this only a wake-up can
        # make the dispatcher read the run again within the hour.
        await wait_for(lambda: counter.settles >= 1, "the dispatcher reading its run once")
        (run,) = runs.started
        status = await db_pool.fetchval(
            "SELECT status FROM kb.graph_objects WHERE id = $1::uuid", task_id
        )
        assert status == "in_progress"

        await db_pool.execute(
            "UPDATE kb.agent_runs SET status = 'completed', summary = 'done', "
            "completed_at = now() WHERE id = $1",
            run["id"],
        )
        # Recording the end NOTIFYs the run-events channel, as the executor does.
        await f.append(db_pool, run=run, events=f.finish_events(run))
        await wait_for_query(
            db_pool,
            "SELECT status = 'completed' FROM kb.graph_objects WHERE id = $1::uuid",
            task_id,
            what="the task completed by the run's end, long before the poll",
        )
    finally:
        stopping.set()
        await loop
