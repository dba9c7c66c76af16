"""Single-flight, numbered reads: one read of the store serves every stream waiting on it.

A feed shared by many streams of a process (a run's events, a task graph) reads the store
through :class:`SharedReads`. Whoever needs fresh data calls :meth:`SharedReads.refresh`
with the number of reads started when the need arose (a notification, a recheck, a new
stream); the first caller reads, everyone arriving meanwhile waits for that read or, if it
started before their need, for the next one. Many streams woken by one notification
therefore cost one read, not one each.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

__all__ = ["NO_READ", "SharedFeed", "SharedReads", "joined_feed"]

NO_READ = -1
"""A :meth:`SharedReads.refresh` mark asking for no read beyond those already owed."""


class SharedReads:
    """Numbers the reads of one feed and runs at most one at a time."""

    def __init__(self, read: Callable[[], Awaitable[None]]) -> None:
        self._read = read
        self._started = 0
        self._done = 0
        self._wanted = NO_READ
        """A read numbered above this is owed (to a notification, an incomplete batch)."""
        self._reading: asyncio.Event | None = None

    @property
    def started(self) -> int:
        """The mark to pass to :meth:`refresh` for "a read that starts from now on"."""
        return self._started

    def owe(self) -> None:
        """The next :meth:`refresh`, whatever its mark, waits for a read starting from now."""
        self._wanted = self._started

    async def refresh(self, need: int) -> None:
        """Returns once a read numbered above ``need`` (and above any read owed now) is done.

        The caller whose turn it is runs the read; callers arriving meanwhile wait for it.
        If the reading caller is cancelled or fails, a waiting one reads instead.
        """
        target = max(need, self._wanted)
        while self._done <= target:
            if self._reading is not None:
                await self._reading.wait()
                continue
            self._reading = reading = asyncio.Event()
            self._started += 1
            number = self._started
            try:
                await self._read()
                self._done = number
            finally:
                self._reading = None
                reading.set()


class SharedFeed:
    """What a feed shared by a process's streams keeps for them: their wake-ups and its
    single-flight reads (:meth:`_read`, the subclass's read of the store)."""

    def __init__(self) -> None:
        self._reads = SharedReads(self._read)
        self._waiters: set[asyncio.Event] = set()

    async def _read(self) -> None:
        raise NotImplementedError

    @property
    def idle(self) -> bool:
        """No stream left: the owner may drop the feed."""
        return not self._waiters

    @contextlib.contextmanager
    def joined(self) -> Iterator[asyncio.Event]:
        """A stream's wake-up, set whenever new data or a new need to read arrives."""
        waiter = asyncio.Event()
        self._waiters.add(waiter)
        try:
            yield waiter
        finally:
            self._waiters.discard(waiter)

    @property
    def reads_started(self) -> int:
        """The mark to pass to a read request for "a read that starts from now on"."""
        return self._reads.started

    async def woken(self, waiter: asyncio.Event, recheck_s: float) -> int:
        """Waits for ``waiter`` (not cleared) or ``recheck_s``; the read mark the stream's
        next read needs. A wake-up owes its read to the feed already (or brought the data);
        a timeout is the periodic recheck, and one read that starts after it serves every
        stream of the feed timing out with it."""
        mark = self.reads_started
        try:
            # asyncio.timeout, not wait_for: no task per wait, and there is one per event.
            async with asyncio.timeout(recheck_s):
                await waiter.wait()
        except TimeoutError:
            return mark
        return NO_READ

    def _wake_all(self) -> None:
        for waiter in self._waiters:
            waiter.set()


F = TypeVar("F", bound=SharedFeed)


@contextlib.contextmanager
def joined_feed(
    feeds: dict[str, dict[str, F]], key: str, project_id: str, make: Callable[[], F]
) -> Iterator[tuple[F, asyncio.Event]]:
    """A stream joined to the feed of ``key`` (a run, a graph) for ``project_id``, made by
    ``make`` if it has none in ``feeds``; the feed is dropped when its last stream leaves.
    Keyed by project too: a feed's reads stay scoped by the project its streams were
    checked against."""
    by_project = feeds.setdefault(key, {})
    feed = by_project.get(project_id)
    if feed is None:
        feed = by_project[project_id] = make()
    try:
        with feed.joined() as waiter:
            yield feed, waiter
    finally:
        if feed.idle and by_project.get(project_id) is feed:
            del by_project[project_id]
            if not by_project:
                feeds.pop(key, None)
