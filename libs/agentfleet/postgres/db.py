"""PostgreSQL access shared by every service: pools, transactions, LISTEN/NOTIFY.

Every connection made here decodes ``json``/``jsonb`` to Python values and encodes Python
values as JSON, so a ``dict`` goes into a ``jsonb`` column and comes back a ``dict``
(a ``str`` parameter is therefore stored as a JSON string, not parsed).
A server that cannot be reached is :class:`agentfleet.errors.Unavailable`, with the
address (password removed) and the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import structlog

from agentfleet.errors import Unavailable
from agentfleet.reconnect import database_outage, quiet_pool_reconnects

__all__ = [
    "Listener",
    "Notification",
    "NotificationCallback",
    "Sink",
    "connect",
    "create_pool",
    "notify",
    "redact",
    "replace_database",
    "transaction",
]

log = structlog.get_logger(__name__)

CONNECT_TIMEOUT_S = 10.0

# What "the server is not there" looks like from asyncpg: refused or missing sockets,
# timeouts, the server closing on us, and server-side refusals (unknown database, bad
# password, too many connections, shutting down).
_CONNECT_ERRORS = (
    OSError,  # TimeoutError included
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
)


async def _init_connection(conn: asyncpg.Connection) -> None:
    for typename in ("json", "jsonb"):
        await conn.set_type_codec(
            typename, schema="pg_catalog", encoder=json.dumps, decoder=json.loads
        )


async def connect(dsn: str, *, connect_timeout_s: float = CONNECT_TIMEOUT_S) -> asyncpg.Connection:
    """Opens one connection with the JSON codecs; :class:`Unavailable` if it cannot."""
    try:
        conn = await asyncpg.connect(dsn, timeout=connect_timeout_s)
    except _CONNECT_ERRORS as exc:
        raise _unavailable(dsn, exc) from exc
    try:
        await _init_connection(conn)
    except BaseException:
        conn.terminate()
        raise
    return conn


async def _keep_session(conn: asyncpg.Connection) -> None:
    """Pool release without asyncpg's default reset query (``pg_advisory_unlock_all(); CLOSE
    ALL; UNLISTEN *; RESET ALL``), a round trip on every release -- half of a step write's.

    asyncpg still rolls back a transaction left open before calling this. Nothing else
    outlives a transaction on our pooled connections: advisory locks are ``_xact_`` ones,
    settings use ``set_config(..., true)``, LISTEN has its own connection (:class:`Listener`)
    and cursors only live inside transactions. The migration lock is session-level but
    released explicitly. Keep it so: session state on a pooled connection would leak.
    """


async def create_pool(
    dsn: str, *, min_size: int = 1, max_size: int = 10, connect_timeout_s: float = CONNECT_TIMEOUT_S
) -> asyncpg.Pool:
    """Creates an asyncpg pool whose connections all carry the JSON codecs.

    The first ``min_size`` connections are opened now, so an unreachable server is reported
    here as :class:`Unavailable` rather than at the first query.
    """
    quiet_pool_reconnects()
    try:
        pool = await asyncpg.create_pool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            init=_init_connection,
            reset=_keep_session,
            timeout=connect_timeout_s,
        )
    except _CONNECT_ERRORS as exc:
        raise _unavailable(dsn, exc) from exc
    assert pool is not None  # create_pool only returns None when not awaited
    return pool


@contextlib.asynccontextmanager
async def transaction(
    pool: asyncpg.Pool, *, isolation: str | None = None
) -> AsyncIterator[asyncpg.Connection]:
    """Yields a pooled connection inside a transaction: committed on exit, rolled back on error.

    ``isolation`` is ``None`` (the server default, read committed), ``"repeatable_read"`` or
    ``"serializable"``.
    """
    async with pool.acquire() as conn, conn.transaction(isolation=isolation):
        yield conn


async def lock_key(conn: asyncpg.Connection, key: str) -> None:
    """A transaction-scoped advisory lock on ``key`` (held until the caller's transaction
    ends): serialises a read-then-write, such as a count checked against a cap and the
    insert it admits, across every replica."""
    await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", key)


async def notify(conn: asyncpg.Connection | asyncpg.Pool, channel: str, payload: str) -> None:
    """Sends ``payload`` on ``channel``; inside a transaction it is delivered at commit."""
    await conn.execute("SELECT pg_notify($1, $2)", channel, payload)


def replace_database(dsn: str, database: str) -> str:
    """The same server address with another database name (URL form only)."""
    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(path="/" + database))


def redact(dsn: str) -> str:
    """``dsn`` without its password, for messages and logs."""
    parts = urlsplit(dsn)
    if parts.password is None:
        return dsn
    netloc = parts.netloc.replace(":" + parts.password + "@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def _unavailable(dsn: str, exc: BaseException) -> Unavailable:
    reason = str(exc) or type(exc).__name__
    if isinstance(exc, TimeoutError):
        reason = "timed out"
    return Unavailable(f"cannot connect to PostgreSQL at {redact(dsn)}: {reason}")


@dataclass(frozen=True, kw_only=True, slots=True)
class Notification:
    """One NOTIFY received by a :class:`Listener`."""

    channel: str
    payload: str


NotificationCallback = Callable[[Notification], None]
"""Called in the event loop for each notification; must not block. Use a queue for async work."""
Sink = NotificationCallback | asyncio.Queue[Notification]


class Listener:
    """LISTENs on one dedicated connection and hands notifications to subscribers.

    Pooled connections cannot LISTEN (the pool resets them with ``UNLISTEN *``), so the
    listener owns its own. When that connection drops it reconnects with backoff and
    LISTENs on every subscribed channel again, then calls the reconnect callbacks:
    notifications sent while it was away are lost, so subscribers that must not miss
    anything re-read the database from there.

    Use as ``async with Listener(dsn) as listener:`` or ``start()`` / ``close()``.
    """

    def __init__(
        self,
        dsn: str,
        *,
        ping_interval_s: float = 30.0,
        min_backoff_s: float = 0.05,
        max_backoff_s: float = 5.0,
    ) -> None:
        self._dsn = dsn
        self._ping_interval_s = ping_interval_s
        self._min_backoff_s = min_backoff_s
        self._max_backoff_s = max_backoff_s
        self._sinks: dict[str, list[Sink]] = {}
        self._reconnect_callbacks: list[Callable[[], None]] = []
        self._conn: asyncpg.Connection | None = None
        # Serialises LISTEN/UNLISTEN with reconnection, so no channel is left unlistened.
        self._lock = asyncio.Lock()
        self._lost = asyncio.Event()
        self._supervisor: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def connected(self) -> bool:
        return self._conn is not None and not self._conn.is_closed()

    @property
    def backend_pid(self) -> int | None:
        """PID of the server process of the current connection (None while reconnecting)."""
        return self._conn.get_server_pid() if self.connected and self._conn else None

    async def start(self) -> None:
        """Connects (:class:`Unavailable` if the server cannot be reached) and starts watching."""
        if self._supervisor is not None:
            return
        async with self._lock:
            await self._connect_locked()
        self._supervisor = asyncio.create_task(self._supervise(), name="db-listener")

    async def close(self) -> None:
        """Stops reconnecting and closes the connection; idempotent."""
        self._closed = True
        if self._supervisor is not None:
            self._supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._supervisor
            self._supervisor = None
        async with self._lock:
            if self._conn is not None:
                conn, self._conn = self._conn, None
                conn.remove_termination_listener(self._on_terminated)
                try:
                    await asyncio.wait_for(conn.close(), timeout=2.0)
                except _CONNECT_ERRORS:
                    conn.terminate()

    async def __aenter__(self) -> Listener:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def subscribe(self, channel: str, sink: Sink) -> None:
        """Delivers every notification on ``channel`` to ``sink`` (callback or queue).

        Once this returns, the channel is LISTENed to (or will be again as soon as a lost
        connection is back).
        """
        async with self._lock:
            first = channel not in self._sinks
            self._sinks.setdefault(channel, []).append(sink)
            if first and self.connected:
                await self._listen_locked(channel)

    async def unsubscribe(self, channel: str, sink: Sink) -> None:
        """Stops delivering to ``sink``; UNLISTENs when it was the channel's last subscriber."""
        async with self._lock:
            sinks = self._sinks.get(channel, [])
            if sink in sinks:
                sinks.remove(sink)
            if sinks or channel not in self._sinks:
                return
            del self._sinks[channel]
            if self.connected and self._conn is not None:
                try:
                    await self._conn.remove_listener(channel, self._dispatch)
                except _CONNECT_ERRORS:
                    self._lost.set()

    def add_reconnect_callback(self, callback: Callable[[], None]) -> None:
        """Calls ``callback`` after every reconnection (not after the first connect)."""
        self._reconnect_callbacks.append(callback)

    def _dispatch(self, _conn: object, _pid: int, channel: str, payload: str) -> None:
        notification = Notification(channel=channel, payload=payload)
        for sink in list(self._sinks.get(channel, ())):
            if isinstance(sink, asyncio.Queue):
                sink.put_nowait(notification)
            else:
                try:
                    sink(notification)
                except Exception:
                    # One faulty subscriber must not starve the others or kill the listener.
                    log.exception("notification_callback_failed", channel=channel)

    def _on_terminated(self, conn: object) -> None:
        # Called soon after the fact: ignore a connection that was already replaced.
        if conn is self._conn:
            self._lost.set()

    async def _connect_locked(self) -> None:
        conn = await connect(self._dsn)
        conn.add_termination_listener(self._on_terminated)
        self._conn = conn
        self._lost.clear()
        for channel in self._sinks:
            await self._listen_locked(channel)

    async def _listen_locked(self, channel: str) -> None:
        assert self._conn is not None
        try:
            await self._conn.add_listener(channel, self._dispatch)
        except _CONNECT_ERRORS:
            # The supervisor reconnects and LISTENs on every channel again.
            self._lost.set()

    async def _supervise(self) -> None:
        while not self._closed:
            try:
                await asyncio.wait_for(self._lost.wait(), timeout=self._ping_interval_s)
            except TimeoutError:
                # Quiet connection: make sure it is still alive (a silent network drop
                # would otherwise go unnoticed until the next LISTEN).
                if await self._ping():
                    continue
            await self._reconnect()

    async def _ping(self) -> bool:
        async with self._lock:
            if self._conn is None or self._conn.is_closed():
                return False
            try:
                await self._conn.fetchval("SELECT 1", timeout=self._ping_interval_s)
            except _CONNECT_ERRORS:
                return False
            return True

    async def _reconnect(self) -> None:
        backoff = self._min_backoff_s
        while True:
            async with self._lock:
                self._drop_connection_locked()
                try:
                    await self._connect_locked()
                except Unavailable as exc:
                    # One warning per outage for the whole process, not one per attempt.
                    database_outage.lost(exc, what="listen")
                else:
                    if not self._lost.is_set():
                        break
            # close() cancels this task, so shutdown interrupts the backoff.
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, self._max_backoff_s)
        database_outage.back()
        log.info("listener_reconnected", channels=sorted(self._sinks))
        for callback in list(self._reconnect_callbacks):
            try:
                callback()
            except Exception:
                log.exception("listener_reconnect_callback_failed")

    def _drop_connection_locked(self) -> None:
        if self._conn is not None:
            self._conn.remove_termination_listener(self._on_terminated)
            self._conn.terminate()
            self._conn = None
