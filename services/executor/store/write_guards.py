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

import json
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import asyncpg

from agentfleet import events
from agentfleet.reconnect import rerun_rolled_back, retry_on_disconnect
from services.executor.runs import RunRecord
from services.executor.store import event_reads, messages, runs

T = TypeVar("T")


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
    back (a deadlock broken, a serialization failure) runs again at once
    (:func:`~agentfleet.reconnect.rerun_rolled_back`): nothing of it was stored."""
    attempts = 0

    async def attempt() -> T:
        nonlocal attempts
        attempts += 1
        if attempts > 1:
            earlier = await committed()
            if earlier is not None:
                return earlier
        return await rerun_rolled_back(write)

    return await retry_on_disconnect(attempt, what=what, pool=pool)
