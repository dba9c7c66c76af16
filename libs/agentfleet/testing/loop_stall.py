"""How long an event loop stood still: the measure of the security tests' "one tenant cannot
stall the shared loop" (the services under test run in the test's own loop)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")

TICK_S = 0.05
"""The ticker's period: a stall shorter than this goes unseen."""


async def longest_stall_during(work: Awaitable[T]) -> tuple[T, float]:
    """``work``'s result, and the longest time (seconds beyond one tick) the running loop
    ran nothing else meanwhile."""
    longest = 0.0
    done = asyncio.Event()

    async def ticker() -> None:
        nonlocal longest
        last = time.monotonic()
        while not done.is_set():
            await asyncio.sleep(TICK_S)
            now = time.monotonic()
            longest = max(longest, now - last - TICK_S)
            last = now

    ticking = asyncio.create_task(ticker())
    try:
        result = await work
    finally:
        done.set()
        await ticking
    return result, longest
