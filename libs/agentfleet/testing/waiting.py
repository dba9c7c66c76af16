"""Waiting for observable state in tests: the one polling loop, always with a deadline.

Tests wait for a condition (a database row, a connection dropped, a metric seen), never
for wall-clock time; a condition not met in time fails the test naming what was awaited.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

DEFAULT_TIMEOUT_S = 30.0
"""Long enough for a loaded two-core machine; a condition met sooner returns at once."""

DATABASE_RESTARTING = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError)
"""Errors of a query while PostgreSQL restarts: with ``transient=`` they mean "not yet"."""


async def wait_for(
    condition: Callable[[], Any | Awaitable[Any]],
    what: str,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    interval_s: float = 0.02,
    transient: tuple[type[BaseException], ...] = (),
) -> Any:
    """Polls ``condition`` (sync or async) until it returns a truthy value, and returns it.

    Raises AssertionError naming ``what`` after ``timeout_s``; an exception of a
    ``transient`` type counts as "not yet".
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        try:
            value = condition()
            if inspect.isawaitable(value):
                value = await value
        except transient:
            value = None
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(f"not within {timeout_s}s: {what}")
        await asyncio.sleep(interval_s)


async def wait_for_query(
    pool: asyncpg.Pool,
    query: str,
    *args: Any,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    what: str = "",
    transient: tuple[type[BaseException], ...] = (),
) -> Any:
    """:func:`wait_for` a database condition: until ``query`` returns a truthy value."""
    return await wait_for(
        lambda: pool.fetchval(query, *args),
        what or f"{query} {args}",
        timeout_s=timeout_s,
        interval_s=0.05,
        transient=transient,
    )
