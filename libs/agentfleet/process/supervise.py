"""How child processes are kept running, by ``agentfleet up`` (its services) and by an
executor host (its workers, :mod:`agentfleet.process.host`): a child that exits is started
again after a backoff (1 s doubling to 30 s), with one line saying so; the others are left
alone. Only a child that keeps crashing (5 exits within 60 s) stops everything, with one
line saying which and why.

Errors::

    CrashLoop (Unavailable)   a service exited too often in too short a time
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from agentfleet.errors import Unavailable


class CrashLoop(Unavailable):
    """A service exited ``max_crashes`` times within ``window_s``: ``up`` stops everything."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RestartPolicy:
    """When and how often a service that exited is started again."""

    first_backoff_s: float = 1.0
    max_backoff_s: float = 30.0
    """The wait doubles with each exit inside the window, up to this."""
    max_crashes: int = 5
    window_s: float = 60.0
    """``max_crashes`` exits within ``window_s`` is a crash loop: everything stops."""

    def backoff_s(self, recent_crashes: int) -> float:
        """The wait before the next start, after ``recent_crashes`` exits in the window."""
        return min(self.first_backoff_s * 2 ** max(0, recent_crashes - 1), self.max_backoff_s)


class Supervised(Protocol):
    """A child process: a service ``up`` started, or a host's worker."""

    name: str
    process: asyncio.subprocess.Process
    log_path: Path

    def exit_reason(self) -> str: ...


Respawn = Callable[[str], Awaitable[asyncio.subprocess.Process]]
"""Starts the named service again; returns its new process."""
Say = Callable[[str], None]


async def supervise(
    children: list[Supervised],
    *,
    respawn: Respawn,
    stop: asyncio.Event,
    say: Say,
    policy: RestartPolicy = RestartPolicy(),
) -> None:
    """Restarts each child that exits until ``stop`` is set (then returns); raises
    :class:`CrashLoop` when one keeps crashing. A restarted child's ``process`` is replaced
    in place, so whoever stops ``children`` later stops the new process."""
    try:
        async with asyncio.TaskGroup() as group:
            for child in children:
                group.create_task(_keep_running(child, respawn, stop, say, policy))
    except* CrashLoop as crashed:
        # The first service found crashing is the news; the group's wrapper is not.
        raise crashed.exceptions[0] from None


async def _keep_running(
    child: Supervised, respawn: Respawn, stop: asyncio.Event, say: Say, policy: RestartPolicy
) -> None:
    crashes: deque[float] = deque()
    restarts = 0
    while True:
        if not await _exited_before(child.process, stop):
            return
        now = time.monotonic()
        crashes.append(now)
        while crashes and now - crashes[0] > policy.window_s:
            crashes.popleft()
        code = child.process.returncode
        if len(crashes) >= policy.max_crashes:
            raise CrashLoop(
                f"{child.name} exited {len(crashes)} times within {policy.window_s:g} s "
                f"(last with code {code}); stopping all services (log: {child.log_path})"
            )
        restarts += 1
        backoff_s = policy.backoff_s(len(crashes))
        say(
            f"{child.name} exited with code {code}; restarting in {backoff_s:g} s "
            f"(restart {restarts}; log: {child.log_path})"
        )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), backoff_s)
        if stop.is_set():
            return
        child.process = await respawn(child.name)
        say(f"{child.name} restarted (pid {child.process.pid})")


async def _exited_before(process: asyncio.subprocess.Process, stop: asyncio.Event) -> bool:
    """Waits for the process to exit (True) or for ``stop`` (False)."""
    exited = asyncio.ensure_future(process.wait())
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({exited, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (exited, stopped):
            task.cancel()
    return not stop.is_set() and process.returncode is not None
