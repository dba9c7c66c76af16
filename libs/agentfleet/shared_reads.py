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
from collections.abc import Awaitable, Callable

__all__ = ["NO_READ", "SharedReads"]

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
