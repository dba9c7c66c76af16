"""WatchRun: replay a run's stored events, then follow new ones as they are committed.

One :class:`agentfleet.db.Listener` per history process LISTENs on ``agentfleet_run_events``
for every watcher. A notification only says "run X has events up to seq N"; the run's
:class:`~services.history.run_feed.RunFeed` then reads the rows after the last seq it has
from the database, once for all of the run's watchers in this process, and each watcher
takes the part after its own last seq. Events therefore always come from the store — any
replica serves any run, a lost notification costs latency, never an event, and the stream
is byte-identical to a replay. After a listener reconnect every feed re-reads.

The transient MODEL_TEXT_DELTA pieces of streamed replies (:mod:`agentfleet.events_delta`)
come on their own channel to each live watcher of the run, which sends them before the
stored event they precede; they are never stored, so a replay has none.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator

import asyncpg
import structlog

from agentfleet import events as ev
from agentfleet import events_delta, metrics
from agentfleet.db import Listener, Notification
from agentfleet.errors import NotFound, Unavailable
from agentfleet.v1 import common_pb2
from services.history.models import WatchTarget
from services.history.queries import HistoryQueries
from services.history.run_feed import BATCH, NO_READ, STOPPED, RunFeed, Step

log = structlog.get_logger(__name__)

# A safety net only: notifications and reconnect callbacks wake watchers; this bounds the
# delay should both ever fail.
RECHECK_INTERVAL_S = 5.0
READY_TIMEOUT_S = 10.0


class RunEventWatch:
    """Shared LISTEN connection and per-run feeds for every WatchRun of this process."""

    def __init__(self, *, pool: asyncpg.Pool, database_url: str) -> None:
        self._pool = pool
        self._queries = HistoryQueries(pool)
        self._listener = Listener(database_url)
        self._feeds: dict[str, dict[str, RunFeed]] = {}
        """run_id -> project_id -> feed. A run has one project; the key keeps a feed's
        reads scoped by the project its watchers were checked against."""
        self._ready = asyncio.Event()
        self._deltas: dict[str, set[events_delta.DeltaFollower]] = {}
        """run_id -> the delta followers of its live watchers."""

    async def run(self, stopping: asyncio.Event) -> None:
        """Background loop: LISTEN until the service stops (the Listener reconnects itself)."""
        await self._listener.start()
        # Deltas first: the listening connection's last statement then names the events
        # channel, which is what operators (and tests) look for in pg_stat_activity.
        await self._listener.subscribe(events_delta.DELTA_CHANNEL, self._on_delta)
        await self._listener.subscribe(ev.CHANNEL, self._on_notification)
        self._listener.add_reconnect_callback(self._wake_all)
        self._ready.set()
        await stopping.wait()

    async def close(self) -> None:
        """Closes the listener and wakes every watcher (idempotent)."""
        self._ready.clear()
        await self._listener.close()
        self._wake_all()

    def feed(self, project_id: str, run_id: str) -> RunFeed | None:
        """The run's current feed, if it has watchers here (for tests and diagnostics)."""
        return self._feeds.get(run_id, {}).get(project_id)

    def _on_notification(self, notification: Notification) -> None:
        parsed = ev.parse_notification(notification.payload)
        if parsed is None:
            return
        run_id, seq = parsed
        for feed in self._feeds.get(run_id, {}).values():
            feed.notify(seq)

    def _on_delta(self, notification: Notification) -> None:
        delta = events_delta.decode_delta(notification.payload)
        if delta is None:
            return
        for follower in self._deltas.get(delta.run_id, ()):
            follower.offer(delta)

    @contextlib.contextmanager
    def _following_deltas(
        self, run_id: str, waiter: asyncio.Event
    ) -> Iterator[events_delta.DeltaFollower]:
        follower = events_delta.DeltaFollower(run_id, wake=waiter)
        self._deltas.setdefault(run_id, set()).add(follower)
        try:
            yield follower
        finally:
            followers = self._deltas.get(run_id)
            if followers is not None:
                followers.discard(follower)
                if not followers:
                    del self._deltas[run_id]

    def _wake_all(self) -> None:
        for feeds in self._feeds.values():
            for feed in feeds.values():
                feed.notify(None)

    @contextlib.contextmanager
    def _joined(
        self, project_id: str, run_id: str, target: WatchTarget
    ) -> Iterator[tuple[RunFeed, asyncio.Event]]:
        feeds = self._feeds.setdefault(run_id, {})
        feed = feeds.get(project_id)
        if feed is None:
            feed = feeds[project_id] = RunFeed(
                pool=self._pool,
                queries=self._queries,
                target_project=project_id,
                run_id=run_id,
                parent_run_id=str(target.parent_run_id) if target.parent_run_id else None,
                trace_id=target.trace_id,
            )
        try:
            with feed.joined() as waiter:
                yield feed, waiter
        finally:
            if feed.idle and feeds.get(project_id) is feed:
                del feeds[project_id]
                if not feeds:
                    del self._feeds[run_id]

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
        last = after_seq
        # Joined before the first read, so a commit between the read and the wait still
        # wakes us.
        parent = str(target.parent_run_id) if target.parent_run_id else None
        with (
            self._joined(project_id, run_id, target) as (feed, waiter),
            self._following_deltas(run_id, waiter) as deltas,
            metrics.watch_subscriber(),
        ):
            need, first = NO_READ, True
            while True:
                waiter.clear()
                for delta in deltas.take(last):
                    yield events_delta.delta_to_proto(
                        delta, parent_run_id=parent, trace_id=target.trace_id
                    )
                step = await self._next_step(feed, last, need=need, first=first)
                first = False
                for event in step.events:
                    for delta in deltas.take(last, upto=event.seq):
                        yield events_delta.delta_to_proto(
                            delta, parent_run_id=parent, trace_id=target.trace_id
                        )
                    last = event.seq
                    if include_internal or not event.is_internal:
                        yield event.message
                if not step.at_end:
                    continue
                if step.events and step.events[-1].is_terminal:
                    return
                if step.stopped:
                    return
                need = await self._wait(feed, waiter)

    @staticmethod
    async def _wait(feed: RunFeed, waiter: asyncio.Event) -> int:
        """Waits for a wake-up; returns the read mark the next step needs. A wake-up owes
        its read to the feed already; a timeout is the periodic recheck, and one read that
        starts after it is shared by every watcher of the run timing out with it."""
        mark = feed.reads_started
        try:
            # asyncio.timeout, not wait_for: no task per wait, and there is one per event.
            async with asyncio.timeout(RECHECK_INTERVAL_S):
                await waiter.wait()
        except TimeoutError:
            return mark
        return NO_READ

    async def _next_step(self, feed: RunFeed, last: int, *, need: int, first: bool) -> Step:
        """The events after ``last``: from the feed if it covers them, else from the store."""
        if feed.covers(last):
            await feed.refresh(need)
            step = feed.step_after(last)
            if step is not None:
                if first and step.at_end and not step.events and not step.stopped:
                    # Joining an idle run: learn now, not at the recheck, that it stopped.
                    stopped = await self._stopped_without_more(feed, last)
                    return Step(events=(), at_end=True, stopped=stopped)
                return step
            # The buffer moved past ``last`` while we waited: catch up from the store.
        batch = await ev.read_events(
            self._pool,
            project_id=feed.project_id,
            run_id=feed.run_id,
            after_seq=last,
            include_internal=True,
            limit=BATCH,
        )
        events = [feed.convert(p) for p in batch]
        if len(batch) == BATCH:
            return Step(events=events, at_end=False)
        feed.seed(last, events)
        stopped = not batch and await self._stopped_without_more(feed, last)
        return Step(events=events, at_end=True, stopped=stopped)

    async def _stopped_without_more(self, feed: RunFeed, last: int) -> bool:
        """A stopped run whose events after ``last`` are all read (e.g. one that stopped
        before it recorded a RUN_FINISHED) has nothing more to stream."""
        target = await self._queries.watch_target(feed.project_id, feed.run_id)
        if target is None:
            return True
        if target.status not in STOPPED:
            return False
        # The status was read after the events: re-read to close the window in which the
        # final events committed between the two reads.
        remaining = await ev.read_events(
            self._pool,
            project_id=feed.project_id,
            run_id=feed.run_id,
            after_seq=last,
            limit=1,
            include_internal=True,
        )
        return not remaining
