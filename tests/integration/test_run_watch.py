"""The one watcher of runs' events (agentfleet.runs.run_watch) on real PostgreSQL and a real
LISTEN connection: StartRun/ResumeRun's end (the next RUN_FINISHED) and WatchRun's (the
latest) over the same stored events, and the change wake-ups a parent waits on for its
children."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest

from agentfleet.postgres.db import Listener
from agentfleet.runs.run_watch import RunWatch
from agentfleet.testing import factories as f
from agentfleet.v1 import common_pb2

P = "watch-one"
STEP = 10.0  # deadline of each wait, seconds
FINISHED = common_pb2.RUN_EVENT_TYPE_RUN_FINISHED


@pytest.fixture
async def listener(database_url: str) -> AsyncIterator[Listener]:
    async with Listener(database_url) as listening:
        yield listening


@pytest.fixture
async def watch(db_pool: asyncpg.Pool, listener: Listener) -> AsyncIterator[RunWatch]:
    watch = RunWatch(pool=db_pool, listener=listener)
    await watch.start()
    try:
        yield watch
    finally:
        await watch.close()


async def _all(stream: AsyncIterator[common_pb2.RunEvent]) -> list[common_pb2.RunEvent]:
    async with asyncio.timeout(STEP):
        return [event async for event in stream]


async def test_start_run_ends_at_the_next_finish_and_watch_run_at_the_latest(
    watch: RunWatch, db_pool: asyncpg.Pool
) -> None:
    run = await f.insert_run(db_pool, project_id=P, agent_name="twice", status="running")
    await f.append(
        db_pool, run=run, events=[*f.start_events(run), *f.finish_events(run, status="paused")]
    )
    await f.append(db_pool, run=run, events=f.finish_events(run))  # the resumed execution
    await db_pool.execute(
        "UPDATE kb.agent_runs SET status = 'completed', completed_at = now() WHERE id = $1",
        run["id"],
    )

    def events(after_seq: int, *, until_next_finish: bool) -> AsyncIterator[common_pb2.RunEvent]:
        return watch.events(
            project_id=P,
            run_id=str(run["id"]),
            after_seq=after_seq,
            include_internal=True,
            until_next_finish=until_next_finish,
        )

    started = await _all(events(0, until_next_finish=True))
    resumed = await _all(events(started[-1].seq, until_next_finish=True))
    whole = await _all(events(0, until_next_finish=False))

    assert started[-1].type == FINISHED
    assert started[-1].run_finished.run.status == common_pb2.RUN_STATUS_PAUSED
    assert resumed[-1].type == FINISHED
    assert resumed[-1].run_finished.run.status == common_pb2.RUN_STATUS_COMPLETED
    # One reader, two ends: the executions' streams put together are the replay.
    assert started + resumed == whole
    assert [e.seq for e in whole] == list(range(1, len(whole) + 1))


async def test_changes_wake_the_followed_runs_only_and_everyone_after_a_reconnect(
    watch: RunWatch, listener: Listener, db_pool: asyncpg.Pool
) -> None:
    mine = await f.insert_run(db_pool, project_id=P, agent_name="child", status="running")
    other = await f.insert_run(db_pool, project_id=P, agent_name="stranger", status="running")
    with (
        watch.changes([str(mine["id"])]) as mine_changed,
        watch.changes([str(other["id"])]) as other_changed,
    ):
        await f.append(db_pool, run=mine, events=f.start_events(mine))
        await asyncio.wait_for(mine_changed.wait(), STEP)
        # The only notification so far was the followed run's.
        assert not other_changed.is_set()

        mine_changed.clear()
        killed = await db_pool.fetchval(
            "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE pid = $1",
            listener.backend_pid,
        )
        assert killed
        # Notifications may have been lost while the listener was away: all wake to re-read.
        await asyncio.wait_for(mine_changed.wait(), STEP)
        await asyncio.wait_for(other_changed.wait(), STEP)


async def test_follow_calls_back_with_the_run_until_unfollowed(
    watch: RunWatch, db_pool: asyncpg.Pool
) -> None:
    run = await f.insert_run(db_pool, project_id=P, agent_name="followed", status="running")
    run_id = str(run["id"])
    called: asyncio.Queue[str] = asyncio.Queue()
    watch.follow(run_id, called.put_nowait)
    await f.append(db_pool, run=run, events=f.start_events(run))
    assert await asyncio.wait_for(called.get(), STEP) == run_id

    watch.unfollow(run_id, called.put_nowait)
    # A change wake-up on the same run, seen after the unfollow, orders the check below.
    with watch.changes([run_id]) as changed:
        await f.append(db_pool, run=run, events=f.finish_events(run))
        await asyncio.wait_for(changed.wait(), STEP)
    assert called.empty()
