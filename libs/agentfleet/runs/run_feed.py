"""One run's recent events, read from the store once for every follower in this process.

A :class:`RunFeed` belongs to one ``(project_id, run_id)``: every read it makes is scoped by
that project, the key a watcher is only given after its own project check. It keeps the
rows it read, already converted to protobuf once, in a bounded buffer of consecutive seqs;
each watcher takes the part after its own last seq. A watcher that is behind the buffer
(a replay, or a slow client) reads the store itself until it reaches the buffer, so a slow
watcher never holds the others back and never loses an event.

Reads are single-flight and numbered (:class:`agentfleet.runs.shared_reads.SharedReads`). Whoever
needs fresh rows calls :meth:`refresh` with the number of reads started when the need arose
(a notification, a reconnect, a recheck); the first caller reads, everyone else waits for
that read's result. Many watchers woken by one notification therefore cost one query, not
one each.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import asyncpg

from agentfleet import events as ev
from agentfleet.runs.shared_reads import SharedFeed
from agentfleet.v1 import common_pb2

STOPPED = frozenset({"completed", "failed", "cancelled", "paused"})
"""Run statuses after which a run records nothing more until it is resumed."""
BATCH = 500
"""Rows per read, the feed's and a catching-up watcher's."""
CAPACITY = 1024
"""Events kept in memory per run; a watcher further behind reads the store."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RunTarget:
    """What a follower needs of a run: identity for the events, status to know when to stop."""

    parent_run_id: str | None
    trace_id: str | None
    status: str


class RunTargets:
    """Reads a run's :class:`RunTarget`, always scoped by the caller's project."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def get(self, project_id: str, run_id: str) -> RunTarget | None:
        """The run's target; None if it does not exist in ``project_id``."""
        row = await self._pool.fetchrow(
            "SELECT parent_run_id, trace_id, status FROM kb.agent_runs "
            "WHERE id = $1::uuid AND project_id = $2",
            run_id,
            project_id,
        )
        if row is None:
            return None
        parent = row["parent_run_id"]
        return RunTarget(
            parent_run_id=str(parent) if parent else None,
            trace_id=row["trace_id"],
            status=row["status"],
        )


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class FeedEvent:
    """A stored event in wire form, shared by every watcher it is sent to."""

    seq: int
    is_internal: bool
    is_terminal: bool
    message: common_pb2.RunEvent
    """Never mutated after conversion: the same object is yielded to every stream."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Step:
    """What a watcher gets at once: events after its last seq, and whether it is at the end."""

    events: Sequence[FeedEvent]
    at_end: bool
    """The store had nothing after ``events`` when they were read (not a full batch)."""
    stopped: bool = False
    """``events`` is empty and the run has stopped: nothing more will come."""


class RunFeed(SharedFeed):
    """The shared read position, buffer and wake-ups of one run's watchers in this process."""

    def __init__(
        self,
        *,
        pool: asyncpg.Pool,
        targets: RunTargets,
        target_project: str,
        run_id: str,
        target: RunTarget,
    ) -> None:
        super().__init__()
        self.project_id = target_project
        self.run_id = run_id
        self._parent_run_id = target.parent_run_id
        self._trace_id = target.trace_id
        """Set when the run starts if it was enqueued without one (learnt at RUN_STARTED)."""
        self._pool = pool
        self._targets = targets
        self._events: list[FeedEvent] = []
        self._head: int | None = None
        """Last seq read from the store; None until a complete read tells where the end is."""
        self._complete = True
        self._stopped_at: int | None = None

    # -- watchers --------------------------------------------------------------------------

    def notify(self, seq: int | None) -> None:
        """The run has events up to ``seq`` (None: unknown, e.g. after a reconnect)."""
        if seq is not None and self._head is not None and seq <= self._head:
            return  # already read: the read that got them woke every watcher
        self._reads.owe()
        self._wake_all()

    # -- the buffer ---------------------------------------------------------------------

    @property
    def parent_run_id(self) -> str | None:
        return self._parent_run_id

    @property
    def trace_id(self) -> str | None:
        return self._trace_id

    async def convert_all(self, batch: Sequence[ev.PersistedEvent]) -> list[FeedEvent]:
        """The wire form of stored events of this run, in order."""
        if self._trace_id is None and any(p.event.type == "run_started" for p in batch):
            # The worker records the run's trace id when it starts a run enqueued without
            # one: from RUN_STARTED on, events carry it.
            target = await self._targets.get(self.project_id, self.run_id)
            started = next(p.seq for p in batch if p.event.type == "run_started")
            before = [self._convert(p) for p in batch if p.seq < started]
            self._trace_id = target.trace_id if target is not None else None
            return before + [self._convert(p) for p in batch if p.seq >= started]
        return [self._convert(p) for p in batch]

    def _convert(self, persisted: ev.PersistedEvent) -> FeedEvent:
        """The wire form of one stored event of this run (the replay form, byte for byte)."""
        return FeedEvent(
            seq=persisted.seq,
            is_internal=persisted.event.is_internal,
            is_terminal=persisted.is_terminal,
            message=ev.to_proto(
                persisted, parent_run_id=self._parent_run_id, trace_id=self._trace_id
            ),
        )

    def covers(self, last: int) -> bool:
        """Whether the buffer holds every event after ``last`` that the feed has read."""
        if self._head is None:
            return False
        first = self._events[0].seq if self._events else self._head + 1
        return last >= first - 1

    def step_after(self, last: int) -> Step | None:
        """The buffered events after ``last``; None if ``last`` is behind the buffer."""
        if not self.covers(last):
            return None
        assert self._head is not None
        first = self._events[0].seq if self._events else self._head + 1
        events = self._events[max(0, last - first + 1) :]
        return Step(
            events=events,
            at_end=self._complete,
            stopped=not events and self._stopped_at == last,
        )

    def seed(self, after_seq: int, read: Sequence[FeedEvent]) -> None:
        """A watcher's own read after ``after_seq`` reached the end of the stored events:
        the first such read tells the feed where to start (and fills its buffer)."""
        if self._head is not None:
            return
        self._head = read[-1].seq if read else after_seq
        self._events = list(read[-CAPACITY:])

    def _append(self, read: Sequence[FeedEvent]) -> None:
        assert self._head is not None
        if read[0].seq != self._head + 1:
            # Seqs are gapless, so this should not happen; if it does, watchers between
            # the old and the new rows catch up from the store rather than skip them.
            self._events.clear()
        self._events.extend(read)
        self._head = read[-1].seq
        self._stopped_at = None
        if len(self._events) > 2 * CAPACITY:
            # Trimmed in chunks, so most appends move nothing.
            del self._events[: len(self._events) - CAPACITY]

    # -- reading ------------------------------------------------------------------------

    async def refresh(self, need: int) -> None:
        """Returns once a read numbered above ``need`` (and above any read owed now) is done
        (:meth:`agentfleet.runs.shared_reads.SharedReads.refresh`)."""
        await self._reads.refresh(need)

    async def _read(self) -> None:
        assert self._head is not None, "refresh before the feed was seeded"
        if await self._read_rows():
            return
        target = await self._targets.get(self.project_id, self.run_id)
        if target is not None and target.status not in STOPPED:
            return
        # The status was read after the events: re-read to close the window in which the
        # final events committed between the two reads.
        if await self._read_rows():
            return
        self._stopped_at = self._head
        self._wake_all()

    async def _read_rows(self) -> bool:
        """Reads the rows after the head into the buffer; True if there were any."""
        assert self._head is not None
        batch = await ev.read_events(
            self._pool,
            project_id=self.project_id,
            run_id=self.run_id,
            after_seq=self._head,
            include_internal=True,
            limit=BATCH,
        )
        if not batch:
            self._complete = True
            return False
        self._append(await self.convert_all(batch))
        self._complete = len(batch) < BATCH
        if not self._complete:
            self._reads.owe()  # the rest is owed to the next refresh
        self._wake_all()
        return True
