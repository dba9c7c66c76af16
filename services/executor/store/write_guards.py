"""What a run's write had already committed when its connection was lost (a PostgreSQL
restart or failover between the commit and its reply), so that :class:`RunRecorder` retries
it without applying it twice.

Each write of a run is recognisable after the fact: one that adds a message by the message
at its seq (a run's message seqs are unique, and only the worker holding the lease adds
them); one that only appends events by the run's newest events being that batch; the end of
the run by the run row's status. Events written with a message share its transaction's
``created_at`` (``now()`` is the transaction's start), which finds them again to publish.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import asyncpg

from agentfleet import events
from agentfleet.reconnect import retry_on_disconnect
from services.executor.runs import RunRecord
from services.executor.store import event_reads, messages, runs

T = TypeVar("T")

ROLLBACK_RETRIES = 5
"""How often a write the server rolled back runs again. A run's write takes its row and
others (the project's usage rows, its events' index entries), and another transaction may
take some of them the other way round: the server breaks the cycle by rolling one side back
(seen in the soak test: 3 of 2,206 runs failed their finish with "deadlock detected"), and
the other side has gone on by the retry."""


async def message_written(pool: asyncpg.Pool, *, run_id: str, seq: int) -> bool:
    """Whether the run already has its message number ``seq``."""
    return await messages.exists(pool, run_id, seq)


async def events_with_message(pool: asyncpg.Pool, *, run_id: str, seq: int) -> list[asyncpg.Record]:
    """The events committed in the transaction that wrote message ``seq``, in seq order."""
    return await event_reads.with_message(pool, run_id, seq)


async def events_appended(
    pool: asyncpg.Pool, *, run_id: str, batch: Sequence[events.RunEvent]
) -> list[asyncpg.Record] | None:
    """The run's newest events when they are ``batch`` (same types, agents and payloads, in
    order): the rows to publish; None when the batch is not there."""
    if not batch:
        return []
    rows = await event_reads.newest(pool, run_id, len(batch))
    if len(rows) != len(batch):
        return None
    for row, event in zip(rows, batch, strict=True):
        # The payload as the jsonb column gives it back (tuples become lists, and so on).
        payload = json.loads(json.dumps(events.event_payload(event)))
        if (row["type"], row["agent_name"], row["payload"]) != (
            event.type,
            event.agent_name,
            payload,
        ):
            return None
    return rows


async def finished_with(
    pool: asyncpg.Pool, run: RunRecord, status: str
) -> tuple[RunRecord, list[asyncpg.Record]] | None:
    """The run row and the events of the commit that ended it, when it ended ``status``;
    None otherwise. The end's events share its ``completed_at`` (the transaction's now())."""
    found = await runs.find(pool, run.project_id, run.id)
    if found is None or found.status != status or found.completed_at is None:
        return None
    return found, await event_reads.created_at(pool, run.id, found.completed_at)


async def write_once(
    write: Callable[[], Awaitable[T]],
    *,
    committed: Callable[[], Awaitable[T | None]],
    what: str,
    pool: asyncpg.Pool,
) -> T:
    """Runs ``write``, through database outages (:func:`retry_on_disconnect`); before each
    new attempt asks ``committed`` whether the cut one had committed after all -- its
    result if so (the write is then not run again), None if not. A write the server rolled
    back (a deadlock broken, a serialization failure) runs again at once, up to
    :data:`ROLLBACK_RETRIES` times: nothing of it was stored."""
    attempts = 0

    async def attempt() -> T:
        nonlocal attempts
        attempts += 1
        if attempts > 1:
            earlier = await committed()
            if earlier is not None:
                return earlier
        for rolled_back in itertools.count(1):
            try:
                return await write()
            except asyncpg.TransactionRollbackError:
                if rolled_back > ROLLBACK_RETRIES:
                    raise
                await asyncio.sleep(random.uniform(0.005, 0.02) * rolled_back)
        raise AssertionError("unreachable")

    return await retry_on_disconnect(attempt, what=what, pool=pool)
