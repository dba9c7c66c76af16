"""WatchRun: replay a run's stored events, then follow new ones as they are committed.

One :class:`agentfleet.db.Listener` per history process LISTENs on ``agentfleet_run_events``
for every watcher. A notification only says "run X has events up to seq N"; the watcher then
reads the rows after its last seq from the database. Events therefore always come from the
store — any replica serves any run, a lost notification costs latency, never an event, and
the stream is byte-identical to a replay. After a listener reconnect every watcher re-reads.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator

import asyncpg
import structlog

from agentfleet import events as ev
from agentfleet.db import Listener, Notification
from agentfleet.errors import NotFound, Unavailable
from agentfleet.v1 import common_pb2
from services.history.queries import HistoryQueries

log = structlog.get_logger(__name__)

_STOPPED = frozenset({"completed", "failed", "cancelled", "paused"})
BATCH = 500
# A safety net only: notifications and reconnect callbacks wake watchers; this bounds the
# delay should both ever fail.
RECHECK_INTERVAL_S = 5.0
READY_TIMEOUT_S = 10.0


class RunEventWatch:
    """Shared LISTEN connection and per-run wake-ups for every WatchRun of this process."""

    def __init__(self, *, pool: asyncpg.Pool, database_url: str) -> None:
        self._pool = pool
        self._queries = HistoryQueries(pool)
        self._listener = Listener(database_url)
        self._waiters: dict[str, set[asyncio.Event]] = {}
        self._ready = asyncio.Event()

    async def run(self, stopping: asyncio.Event) -> None:
        """Background loop: LISTEN until the service stops (the Listener reconnects itself)."""
        await self._listener.start()
        await self._listener.subscribe(ev.CHANNEL, self._on_notification)
        self._listener.add_reconnect_callback(self._wake_all)
        self._ready.set()
        await stopping.wait()

    async def close(self) -> None:
        """Closes the listener and wakes every watcher (idempotent)."""
        self._ready.clear()
        await self._listener.close()
        self._wake_all()

    def _on_notification(self, notification: Notification) -> None:
        parsed = ev.parse_notification(notification.payload)
        if parsed is None:
            return
        for waiter in self._waiters.get(parsed[0], ()):
            waiter.set()

    def _wake_all(self) -> None:
        for waiters in self._waiters.values():
            for waiter in waiters:
                waiter.set()

    @contextlib.contextmanager
    def _waiter(self, run_id: str) -> Iterator[asyncio.Event]:
        waiter = asyncio.Event()
        self._waiters.setdefault(run_id, set()).add(waiter)
        try:
            yield waiter
        finally:
            waiters = self._waiters.get(run_id)
            if waiters is not None:
                waiters.discard(waiter)
                if not waiters:
                    del self._waiters[run_id]

    async def watch(
        self, *, project_id: str, run_id: str, after_seq: int, include_internal: bool
    ) -> AsyncIterator[common_pb2.RunEvent]:
        """Events after ``after_seq``; ends after a RUN_FINISHED that is the run's latest
        event (a resumed run's earlier RUN_FINISHED does not end a replay), or once the run
        has stopped and every stored event has been sent."""
        target = await self._queries.watch_target(project_id, run_id)
        if target is None:
            raise NotFound(f"run {run_id} not found")
        try:
            await asyncio.wait_for(self._ready.wait(), READY_TIMEOUT_S)
        except TimeoutError:
            raise Unavailable("history is not listening for run events yet") from None
        parent, trace = target.parent_run_id, target.trace_id
        last = after_seq
        # Registered before the first read, so a commit between the read and the wait
        # still wakes us.
        with self._waiter(run_id) as waiter:
            while True:
                waiter.clear()
                batch = await ev.read_events(
                    self._pool,
                    project_id=project_id,
                    run_id=run_id,
                    after_seq=last,
                    include_internal=True,
                    limit=BATCH,
                )
                for persisted in batch:
                    last = persisted.seq
                    if include_internal or not persisted.event.is_internal:
                        yield ev.to_proto(
                            persisted,
                            parent_run_id=str(parent) if parent else None,
                            trace_id=trace,
                        )
                if len(batch) == BATCH:
                    continue
                if batch and batch[-1].is_terminal:
                    return
                if not batch and await self._stopped_without_more(project_id, run_id, last):
                    return
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(waiter.wait(), RECHECK_INTERVAL_S)

    async def _stopped_without_more(self, project_id: str, run_id: str, last: int) -> bool:
        """A stopped run whose events after ``last`` are all read (e.g. one that stopped
        before it recorded a RUN_FINISHED) has nothing more to stream."""
        target = await self._queries.watch_target(project_id, run_id)
        if target is None:
            return True
        if target.status not in _STOPPED:
            return False
        # The status was read after the events: re-read to close the window in which the
        # final events committed between the two reads.
        remaining = await ev.read_events(
            self._pool,
            project_id=project_id,
            run_id=run_id,
            after_seq=last,
            limit=1,
            include_internal=True,
        )
        return not remaining
