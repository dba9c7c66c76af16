"""RunEventNotifier: the NOTIFY of committed writes, sent after them, many in one statement."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg

from agentfleet import events as ev
from agentfleet.postgres import db
from agentfleet.postgres.db import Listener, Notification

DEADLINE_S = 5


async def _until_marker(received: asyncio.Queue[Notification], pool: asyncpg.Pool) -> list[str]:
    """Every payload received before a marker sent now (a round trip on another connection
    after which the server has delivered everything sent before it)."""
    await pool.execute("SELECT pg_notify($1, 'marker')", ev.CHANNEL)
    payloads: list[str] = []
    while (note := await asyncio.wait_for(received.get(), DEADLINE_S)).payload != "marker":
        payloads.append(note.payload)
    return payloads


async def test_what_comes_in_during_a_send_goes_in_the_next_with_each_runs_highest_seq(
    db_pool: asyncpg.Pool, database_url: str
) -> None:
    first, second = str(uuid.uuid4()), str(uuid.uuid4())
    received: asyncio.Queue[Notification] = asyncio.Queue()
    notifier = ev.RunEventNotifier(db_pool)
    async with Listener(database_url) as listener:
        await listener.subscribe(ev.CHANNEL, received)
        notifier.committed(first, 2)  # starts a send, which has not run yet
        notifier.committed(first, 4)
        notifier.committed(first, 3)  # a lower seq never replaces a higher one
        notifier.committed(second, 7)
        await notifier.flush()
        assert sorted(await _until_marker(received, db_pool)) == sorted(
            [f"{first}:4", f"{second}:7"]
        )

        notifier.committed(first, 9)
        await notifier.flush()
        assert await _until_marker(received, db_pool) == [f"{first}:9"]


async def test_a_failed_send_is_dropped_and_the_next_one_is_sent(
    db_pool: asyncpg.Pool, database_url: str
) -> None:
    run_id = str(uuid.uuid4())
    closed = await db.create_pool(database_url, min_size=1, max_size=1)
    await closed.close()
    lost = ev.RunEventNotifier(closed)
    lost.committed(run_id, 1)
    await lost.flush()  # the send failed; nothing is raised to the writer

    received: asyncio.Queue[Notification] = asyncio.Queue()
    notifier = ev.RunEventNotifier(db_pool)
    async with Listener(database_url) as listener:
        await listener.subscribe(ev.CHANNEL, received)
        lost.committed(run_id, 2)
        await lost.flush()
        notifier.committed(run_id, 3)
        await notifier.flush()
        assert await _until_marker(received, db_pool) == [f"{run_id}:3"]
