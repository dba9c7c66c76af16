"""The one watcher of runs' events in a process: StartRun/ResumeRun, WatchRun, child runs.

One :class:`agentfleet.postgres.db.Listener` per process LISTENs on ``agentfleet_run_events`` for
every follower. A notification only says "run X has events up to seq N"; the run's
:class:`~agentfleet.runs.run_feed.RunFeed` then reads the rows after the last seq it has from
the database, once for all of the run's streams in this process, and each stream takes
the part after its own last seq. Events therefore always come from the store -- any
replica serves any run, a lost notification costs latency, never an event, and a live
stream is byte-identical to a replay. After a listener reconnect every feed re-reads.

The transient MODEL_TEXT_DELTA pieces of streamed replies (:mod:`agentfleet.events.delta`)
come on their own channel to each live stream of the run, which sends them before the
stored event they precede; they are never stored, so a replay has none.

Followers that only need to know *that* a run recorded something take a wake-up and read
what they need themselves: :meth:`RunWatch.changes` for a fixed set of runs (a parent
waiting for its children), :meth:`RunWatch.follow` for a set that changes (the dispatcher's
in-flight runs). After a listener reconnect every follower of every run is woken.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Collection, Iterator
from typing import TypeAlias, TypeVar

import asyncpg

from agentfleet import events as ev
from agentfleet.errors import NotFound, Unavailable
from agentfleet.events import delta as events_delta
from agentfleet.postgres.db import Listener, Notification
from agentfleet.runs.run_feed import BATCH, STOPPED, RunFeed, RunTarget, RunTargets, Step
from agentfleet.runs.shared_reads import NO_READ, joined_feed
from agentfleet.v1 import common_pb2

__all__ = ["RECHECK_INTERVAL_S", "OnChange", "RunWatch"]

# A safety net only: notifications and reconnect callbacks wake streams; this bounds the
# delay should both ever fail.
RECHECK_INTERVAL_S = 5.0
READY_TIMEOUT_S = 10.0

_T = TypeVar("_T")

OnChange: TypeAlias = Callable[[str], None]
"""Called in the event loop with the id of a followed run that recorded events (or, after a
listener reconnect, of every followed run); must not block or raise."""


class RunWatch:
    """Per-run feeds, delta fan-out and change wake-ups over one shared listener.

    The owner starts the listener, then :meth:`start`; it closes the listener itself.
    """

    def __init__(self, *, pool: asyncpg.Pool, listener: Listener, deltas: bool = True) -> None:
        """``deltas`` False: no LISTEN on the delta channel, whose traffic is every piece of
        every streamed reply -- for a process that follows changes but serves no streams."""
        self._pool = pool
        self._with_deltas = deltas
        self._targets = RunTargets(pool)
        self._listener = listener
        self._feeds: dict[str, dict[str, RunFeed]] = {}
        """run_id -> project_id -> feed. A run has one project; the key keeps a feed's
        reads scoped by the project its streams were checked against."""
        self._ready = asyncio.Event()
        self._started = False
        self._deltas: dict[str, set[events_delta.DeltaFollower]] = {}
        """run_id -> the delta followers of its live streams."""
        self._followers: dict[str, set[OnChange]] = {}
        """run_id -> the callbacks of :meth:`follow` (and :meth:`changes`) following it."""

    async def start(self) -> None:
        """Subscribes to the event channel, and the delta channel unless built without
        (idempotent)."""
        if self._started:
            return
        self._started = True
        # Deltas first: the listening connection's last statement then names the events
        # channel, which is what operators (and tests) look for in pg_stat_activity.
        if self._with_deltas:
            await self._listener.subscribe(events_delta.DELTA_CHANNEL, self._on_delta)
        await self._listener.subscribe(ev.CHANNEL, self._on_notification)
        self._listener.add_reconnect_callback(self._wake_all)
        self._ready.set()

    async def close(self) -> None:
        """Stops serving new streams and wakes every open one (idempotent)."""
        self._ready.clear()
        self._wake_all()

    def feed(self, project_id: str, run_id: str) -> RunFeed | None:
        """The run's current feed, if it has streams here (for tests and diagnostics)."""
        return self._feeds.get(run_id, {}).get(project_id)

    # -- notifications (called in the event loop; never block) ---------------------------

    def _on_notification(self, notification: Notification) -> None:
        parsed = ev.parse_notification(notification.payload)
        if parsed is None:
            return
        run_id, seq = parsed
        for feed in self._feeds.get(run_id, {}).values():
            feed.notify(seq)
        # A copy: a callback may stop following.
        for on_change in list(self._followers.get(run_id, ())):
            on_change(run_id)

    def _on_delta(self, notification: Notification) -> None:
        delta = events_delta.decode_delta(notification.payload)
        if delta is None:
            return
        for follower in self._deltas.get(delta.run_id, ()):
            follower.offer(delta)

    def _wake_all(self) -> None:
        for feeds in self._feeds.values():
            for feed in feeds.values():
                feed.notify(None)
        for run_id, followers in list(self._followers.items()):
            for on_change in list(followers):
                on_change(run_id)

    # -- change wake-ups ----------------------------------------------------------------

    def follow(self, run_id: str, on_change: OnChange) -> None:
        """Calls ``on_change(run_id)`` whenever the run records events, and after every
        listener reconnect (notifications may have been lost), until :meth:`unfollow`."""
        self._followers.setdefault(run_id, set()).add(on_change)

    def unfollow(self, run_id: str, on_change: OnChange) -> None:
        """Stops :meth:`follow` (no-op if not following)."""
        _discard(self._followers, run_id, on_change)

    @contextlib.contextmanager
    def changes(self, run_ids: Collection[str]) -> Iterator[asyncio.Event]:
        """An event set whenever one of ``run_ids`` records events, or after a listener
        reconnect (notifications may have been lost): clear it, read, then wait on it."""
        waiter = asyncio.Event()

        def wake(_run_id: str) -> None:
            waiter.set()

        for run_id in run_ids:
            self.follow(run_id, wake)
        try:
            yield waiter
        finally:
            for run_id in run_ids:
                self.unfollow(run_id, wake)

    # -- event streams ------------------------------------------------------------------

    async def events(
        self,
        *,
        project_id: str,
        run_id: str,
        after_seq: int,
        include_internal: bool,
        until_next_finish: bool = False,
    ) -> AsyncIterator[common_pb2.RunEvent]:
        """The run's events after ``after_seq``, then live ones with the deltas in between.

        Ends after a RUN_FINISHED that is the run's latest event (a resumed run's earlier
        RUN_FINISHED does not end a replay), or once the run has stopped and every stored
        event has been sent. ``until_next_finish``: ends at the first RUN_FINISHED after
        ``after_seq`` (StartRun and ResumeRun follow the execution they started).
        NotFound if the run is not one of ``project_id``.
        """
        target = await self._targets.get(project_id, run_id)
        if target is None:
            raise NotFound(f"run {run_id} not found")
        try:
            await asyncio.wait_for(self._ready.wait(), READY_TIMEOUT_S)
        except TimeoutError:
            raise Unavailable("not listening for run events yet") from None
        last = after_seq
        # Joined before the first read, so a commit between the read and the wait still
        # wakes us.
        with (
            self._joined(project_id, run_id, target) as (feed, waiter),
            self._following_deltas(run_id, waiter) as deltas,
        ):
            need, first = NO_READ, True
            while True:
                waiter.clear()
                for delta in deltas.take(last):
                    yield _delta_message(feed, delta)
                step = await self._next_step(feed, last, need=need, first=first)
                first = False
                for event in step.events:
                    for delta in deltas.take(last, upto=event.seq):
                        yield _delta_message(feed, delta)
                    last = event.seq
                    if include_internal or not event.is_internal:
                        yield event.message
                    if until_next_finish and event.is_terminal:
                        return
                if not step.at_end:
                    continue
                if step.events and step.events[-1].is_terminal:
                    return
                if step.stopped:
                    return
                need = await feed.woken(waiter, RECHECK_INTERVAL_S)

    def _joined(
        self, project_id: str, run_id: str, target: RunTarget
    ) -> contextlib.AbstractContextManager[tuple[RunFeed, asyncio.Event]]:
        return joined_feed(
            self._feeds,
            run_id,
            project_id,
            lambda: RunFeed(
                pool=self._pool,
                targets=self._targets,
                target_project=project_id,
                run_id=run_id,
                target=target,
            ),
        )

    @contextlib.contextmanager
    def _following_deltas(
        self, run_id: str, waiter: asyncio.Event
    ) -> Iterator[events_delta.DeltaFollower]:
        follower = events_delta.DeltaFollower(run_id, wake=waiter)
        self._deltas.setdefault(run_id, set()).add(follower)
        try:
            yield follower
        finally:
            _discard(self._deltas, run_id, follower)

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
        batch = await self._read_after(feed, last, limit=BATCH)
        events = await feed.convert_all(batch)
        if len(batch) == BATCH:
            return Step(events=events, at_end=False)
        feed.seed(last, events)
        stopped = not batch and await self._stopped_without_more(feed, last)
        return Step(events=events, at_end=True, stopped=stopped)

    async def _stopped_without_more(self, feed: RunFeed, last: int) -> bool:
        """A stopped run whose events after ``last`` are all read (e.g. one that stopped
        before it recorded a RUN_FINISHED) has nothing more to stream."""
        target = await self._targets.get(feed.project_id, feed.run_id)
        if target is None:
            return True
        if target.status not in STOPPED:
            return False
        # The status was read after the events: re-read to close the window in which the
        # final events committed between the two reads.
        return not await self._read_after(feed, last, limit=1)

    async def _read_after(self, feed: RunFeed, last: int, *, limit: int) -> list[ev.PersistedEvent]:
        """The run's stored events after ``last`` (internal ones too: streams filter)."""
        return await ev.read_events(
            self._pool,
            project_id=feed.project_id,
            run_id=feed.run_id,
            after_seq=last,
            include_internal=True,
            limit=limit,
        )


def _delta_message(feed: RunFeed, delta: events_delta.TextDelta) -> common_pb2.RunEvent:
    return events_delta.delta_to_proto(
        delta, parent_run_id=feed.parent_run_id, trace_id=feed.trace_id
    )


def _discard(registry: dict[str, set[_T]], run_id: str, item: _T) -> None:
    """Removes ``item`` from the run's set, and the set once it is empty."""
    items = registry.get(run_id)
    if items is not None:
        items.discard(item)
        if not items:
            del registry[run_id]
