"""Riding out a PostgreSQL restart or failover: which errors mean "the server went away",
retrying an operation on a fresh connection until it is back, and logging each outage once.

A restart shows up in asyncpg as a handful of errors (the server refusing connections while
it starts, closing sessions at shutdown, a pooled connection found dead at its next use);
:func:`is_disconnect` names them all. :func:`retry_on_disconnect` runs an operation again
with backoff while they last (up to :data:`DISCONNECT_RETRY_S`); asyncpg's pool replaces a
closed connection at the next acquire, so each attempt gets a live one once the server is
back. :data:`database_outage` turns the many failures of one outage into one warning line
and one "back" line per process, rather than a traceback per operation.

A write the server rolled back to break a deadlock or a serialization failure is no outage,
but is as safe to run again (nothing of it was stored): :func:`rerun_rolled_back`.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import asyncpg
import structlog
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_delay,
    wait_exponential_jitter,
)

__all__ = [
    "DISCONNECT_RETRY_S",
    "ROLLBACK_RETRIES",
    "OutageLog",
    "database_outage",
    "is_disconnect",
    "quiet_expired_closes",
    "quiet_pool_reconnects",
    "rerun_rolled_back",
    "retry_on_disconnect",
]

log = structlog.get_logger(__name__)

T = TypeVar("T")

DISCONNECT_RETRY_S = 60.0
"""How long an operation is retried while the database is unreachable (a restart or a
failover takes seconds; past a minute the caller's own failure handling takes over)."""

# 57P01 admin_shutdown, 57P02 crash_shutdown, 57P03 cannot_connect_now (starting up, shutting
# down, in recovery), and the 08 class (connection exception) with its subclasses.
_DISCONNECT_ERRORS: tuple[type[BaseException], ...] = (
    asyncpg.PostgresConnectionError,
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
    asyncpg.CannotConnectNowError,
    OSError,  # refused, reset, unreachable; TimeoutError of a connect included
)


def is_disconnect(exc: BaseException) -> bool:
    """True when ``exc`` says the server or the connection went away, so the same operation
    may succeed on a new connection; False for every error of the operation itself."""
    if isinstance(exc, _DISCONNECT_ERRORS):
        return True
    if isinstance(exc, asyncpg.InternalClientError):
        # "cannot switch to state N; another operation (2) is in progress": a pooled
        # connection that received the server's goodbye but not yet its end of stream.
        return "cannot switch to state" in str(exc)
    # asyncpg's "connection is closed": a pooled connection the server already dropped.
    # ("pool is closed" / "pool is closing" are our own shutdown, not an outage.)
    return isinstance(exc, asyncpg.InterfaceError) and "connection is closed" in str(exc)


class OutageLog:
    """Logs a database outage once per process: a warning at the first failure, an info line
    at the first success after it. Failures soon after the "back" line (pooled connections
    that died with the old server, found one by one) belong to the same outage."""

    def __init__(self, *, settle_s: float = 10.0) -> None:
        self._settle_s = settle_s
        self._since: float | None = None
        self._back_at: float | None = None

    @property
    def ongoing(self) -> bool:
        return self._since is not None

    def lost(self, exc: BaseException, *, what: str) -> None:
        """An operation (``what``) failed because the database is unreachable."""
        if self._since is not None:
            return
        now = time.monotonic()
        self._since = now
        if self._back_at is not None and now - self._back_at < self._settle_s:
            return  # the tail of the outage just logged as over
        log.warning(
            "database_unreachable",
            error=f"{type(exc).__name__}: {exc}",
            during=what,
            retrying_for_s=DISCONNECT_RETRY_S,
        )

    def back(self) -> None:
        """An operation succeeded: the outage, if any, is over."""
        if self._since is None:
            return
        now = time.monotonic()
        if self._back_at is None or now - self._back_at >= self._settle_s:
            log.info("database_reachable_again", after_s=round(now - self._since, 1))
        self._since = None
        self._back_at = now


database_outage = OutageLog()
"""The process's outage log, shared by every retried operation and the LISTEN connection."""


async def retry_on_disconnect(
    operation: Callable[[], Awaitable[T]],
    *,
    what: str,
    budget_s: float = DISCONNECT_RETRY_S,
    outage: OutageLog = database_outage,
    pool: asyncpg.Pool | None = None,
) -> T:
    """Runs ``operation``; while it fails with :func:`is_disconnect` errors, runs it again
    with backoff (50 ms doubling to 2 s) for up to ``budget_s``, then lets the last error
    through. Any other error propagates at once.

    An attempt cut by a disconnect may have committed before its reply was lost: the
    operation must be safe to run again (a conditional statement, or a check of what the
    previous attempt wrote) -- run it again only knowing that.

    ``pool``: the pool the operation uses; at each disconnect its connections are expired
    (replaced at their next acquire), since the others from before the outage may be dead
    without knowing it yet.
    """

    async def attempt() -> T:
        try:
            return await operation()
        except Exception as exc:
            if pool is not None and is_disconnect(exc):
                await pool.expire_connections()
            raise

    def note_failure(state: RetryCallState) -> None:
        if state.outcome is not None and (exc := state.outcome.exception()) is not None:
            outage.lost(exc, what=what)

    # The first attempt runs bare: it is every write of every step, and building the
    # retrying machinery costs more CPU than a step's own bookkeeping (tenacity inspects its
    # callables at each call). Only an attempt cut by a disconnect enters the backoff loop.
    began = time.monotonic()
    try:
        result = await attempt()
    except Exception as exc:
        if not is_disconnect(exc) or time.monotonic() - began >= budget_s:
            raise
        outage.lost(exc, what=what)
    else:
        outage.back()
        return result
    # As the loop would have waited before its second attempt.
    await asyncio.sleep(0.05 + random.uniform(0, 0.05))
    retrying = AsyncRetrying(
        retry=retry_if_exception(is_disconnect),
        wait=wait_exponential_jitter(initial=0.05, max=2.0, jitter=0.05),
        stop=stop_after_delay(max(0.0, budget_s - (time.monotonic() - began))),
        before_sleep=note_failure,
        reraise=True,
    )
    result = await retrying(attempt)
    outage.back()
    return result


ROLLBACK_RETRIES = 5
"""How often a write the server rolled back runs again. A write takes its rows and others (a
run's write: the project's usage rows, its events' index entries; the dispatcher's settle:
its tasks, their sessions, the dependents they ready), and another transaction may take some
of them the other way round: the server breaks the cycle by rolling one side back (seen in
the soak test: 3 of 2,206 runs failed their finish with "deadlock detected"), and the other
side has gone on by the retry."""


async def rerun_rolled_back(
    write: Callable[[], Awaitable[T]], *, retries: int = ROLLBACK_RETRIES
) -> T:
    """Runs ``write``; when the server rolled it back (``asyncpg.TransactionRollbackError``:
    a deadlock broken, a serialization failure) runs it again at once, after a short random
    pause that grows with each rerun (5-20 ms times its number, so two sides that collided
    do not collide again in step), up to ``retries`` times; then lets the error through.
    Any other error propagates at once.

    Nothing of a rolled-back attempt was stored, so ``write`` must be a whole transaction (a
    statement in autocommit, or a block opening its own): inside an enclosing transaction
    the server has aborted, a rerun would only fail again."""
    for rolled_back in itertools.count(1):
        try:
            return await write()
        except asyncpg.TransactionRollbackError:
            if rolled_back > retries:
                raise
            await asyncio.sleep(random.uniform(0.005, 0.02) * rolled_back)
    raise AssertionError("unreachable")


class _PoolFloorFilter(logging.Filter):
    """asyncpg's pool refills itself to ``min_size`` in the background and logs a traceback
    at each failed attempt while the server is away: the outage log says it once instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and is_disconnect(exc):
            database_outage.lost(exc, what="refilling the connection pool")
            return False
        return True


_POOL_FLOOR_FILTER = _PoolFloorFilter()


def quiet_pool_reconnects() -> None:
    """Routes asyncpg's pool reconnection failures to :data:`database_outage`, and its failed
    closes of expired connections (idempotent; called inside the running loop)."""
    logging.getLogger("asyncpg.pool").addFilter(_POOL_FLOOR_FILTER)
    loop = asyncio.get_running_loop()
    if loop.get_exception_handler() is None:
        loop.set_exception_handler(quiet_expired_closes)


def quiet_expired_closes(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The loop's exception handler: asyncpg's pool closes a connection that
    ``expire_connections`` retired (:func:`retry_on_disconnect`, at a disconnect) in a task
    nobody awaits; when the server is gone that close fails on the dead socket, and asyncio
    would print "Task exception was never retrieved" with a traceback. Nothing is lost (the
    holder already has a new connection): the outage log counts it. Anything else goes to
    the default handler."""
    exc = context.get("exception")
    future = context.get("future")
    coro = future.get_coro() if isinstance(future, asyncio.Task) else None
    if (
        exc is not None
        and is_disconnect(exc)
        and getattr(coro, "cr_code", None) is asyncpg.Connection.close.__code__
    ):
        database_outage.lost(exc, what="closing an expired connection")
        return
    loop.default_exception_handler(context)
