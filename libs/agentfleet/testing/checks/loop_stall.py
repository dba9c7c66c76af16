"""How long an event loop stood still: the measure of the security tests' "one tenant cannot
stall the shared loop" (the services under test run in the test's own loop)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
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


PROBE_SAMPLES = 5
"""Calls of the probe measured before the work, for its baseline (the median)."""


async def probe_latency_during(
    start_work: Callable[[], Awaitable[T]], probe: Callable[[], Awaitable[object]]
) -> tuple[T, float, float]:
    """The result of the work ``start_work`` starts (or its exception, re-raised), the
    ``probe``'s baseline latency (the median of :data:`PROBE_SAMPLES` calls before it
    starts), and its slowest call while it ran: what another project waits for its
    cheapest RPC on the same process during an attack. A factory, not an awaitable: a gRPC
    call starts when created, and would run during the baseline."""
    timings = []
    for _ in range(PROBE_SAMPLES):
        started = time.monotonic()
        await probe()
        timings.append(time.monotonic() - started)
    baseline = sorted(timings)[len(timings) // 2]
    slowest = 0.0
    done = asyncio.Event()

    async def prober() -> None:
        # A probe is due every tick; its latency counts from when it was due, so a loop
        # held between two probes is seen as the wait of a request arriving then.
        nonlocal slowest
        due = first_due
        while not done.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), max(0.0, due - time.monotonic()))
            if done.is_set():
                break
            await probe()
            ended = time.monotonic()
            slowest = max(slowest, ended - due)
            due = ended + TICK_S
        slowest = max(slowest, time.monotonic() - due)

    # Due from now: the work may hold the loop before the prober first runs.
    first_due = time.monotonic()
    probing = asyncio.create_task(prober())
    try:
        result = await start_work()
    finally:
        done.set()
        await probing
    return result, baseline, slowest


def latency_bound(baseline: float) -> float:
    """The most another project's RPC may take during an attack: 1.5 s, or 10 times its
    baseline on a slow machine."""
    return max(1.5, 10 * baseline)
