"""``McpClientPool``: the toolpool's sessions to external MCP servers.

One session per (project, server), opened on first use and shared by concurrent calls;
a session whose transport ended is dropped and the next use opens a new one. A call that
finds its session dead before its request left this process (or that the server refused
for an unknown session) is retried once on a new session; one that may have reached the
server is reported, never repeated. Each server has a :class:`CircuitBreaker`; tool lists
are cached per server until its configuration or secrets change (:meth:`invalidate`,
NOTIFY on :data:`~services.toolpool.mcp.store.CHANGES_CHANNEL`).

Project scope: every key is (project_id, server name) and the configuration and secrets
passed in are the project's own, resolved by the caller.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TextIO, TypeVar

import structlog

from agentfleet.egress import EgressPolicy
from agentfleet.errors import InvalidArgument, PermissionDenied
from agentfleet.mcp.servers import McpServerConfig
from agentfleet.mcp.stdio import StdioAllowlist
from agentfleet.postgres.db import Listener, Notification

from .breaker import BreakerState, CircuitBreaker
from .calls import SessionLost, call_tool, list_tools, why_lost
from .connection import McpConnection
from .content import DEFAULT_MAX_INLINE_BYTES, map_call_result, redacted_error
from .errors import (
    CircuitOpenError,
    McpProtocolError,
    McpTimeoutError,
    McpUnavailableError,
    MissingSecretError,
)
from .interpolate import ResolvedServer, resolve_server
from .marks import CURRENT_MARK, SendMark
from .models import CallOutcome, McpCallResult, McpServerProbe, McpToolList
from .redaction import redactor
from .store import CHANGES_CHANNEL
from .validation import check_stdio_allowed

log = structlog.get_logger(__name__)

Key = tuple[str, str]
T = TypeVar("T")
MAX_HEALTH_ERROR_CHARS = 500
"""A server's last error as its health shows it (McpServerHealth.last_error)."""


def _shown(message: str, secrets: Mapping[str, str]) -> str:
    # The server's text may quote the secrets it was given, and be long.
    return redactor(secrets).bounded(message, MAX_HEALTH_ERROR_CHARS)


@dataclass(frozen=True, slots=True)
class _Target:
    """A server as one operation reaches it: the configuration, its settings with the
    project's secrets filled in, and those secrets (never to appear in what it reports)."""

    config: McpServerConfig
    resolved: ResolvedServer
    secrets: Mapping[str, str]

    @classmethod
    def of(cls, config: McpServerConfig, secrets: Mapping[str, str]) -> _Target:
        return cls(config, resolve_server(config, secrets), secrets)


class McpClientPool:
    """Lazily connected, shared, self-healing sessions to the projects' MCP servers."""

    def __init__(
        self,
        *,
        new_breaker: Callable[[], CircuitBreaker] = CircuitBreaker,
        max_inline_bytes: int = DEFAULT_MAX_INLINE_BYTES,
        errlog: TextIO | None = None,
        stdio_allowlist: StdioAllowlist = (),
        egress: EgressPolicy | None = None,
    ) -> None:
        """``new_breaker`` makes each server's circuit breaker; ``errlog`` receives stdio
        servers' stderr (default: this process's stderr); ``stdio_allowlist``: the command
        lines a stdio server may run (none by default)."""
        self.stdio_allowlist = stdio_allowlist
        self.egress = egress if egress is not None else EgressPolicy()
        """Where HTTP servers may be reached (default: public addresses only)."""
        self._new_breaker = new_breaker
        self._max_inline_bytes = max_inline_bytes
        self._errlog = errlog
        self._connections: dict[Key, McpConnection] = {}
        self._breakers: dict[Key, CircuitBreaker] = {}
        self._tools: dict[Key, tuple[tuple[object, ...], McpToolList]] = {}
        self._owners: set[asyncio.Task[None]] = set()
        # Bumped by every invalidation, so a listing that straddles one is not cached.
        self._generation = 0
        self._closed = False

    # -- the API the toolpool server calls -------------------------------------------

    async def list_tools(self, config: McpServerConfig, secrets: Mapping[str, str]) -> McpToolList:
        """The server's tools, bounded (cached until its configuration or secrets change).

        Raises :class:`MissingSecretError`, :class:`CircuitOpenError`,
        :class:`McpUnavailableError`, :class:`McpTimeoutError` or :class:`McpProtocolError`.
        """
        key = (config.project_id, config.name)
        target = _Target.of(config, secrets)
        cached = self._tools.get(key)
        if cached is not None and cached[0] == target.resolved.fingerprint():
            return cached[1]
        generation = self._generation
        tools = await self._guarded(target, lambda conn: list_tools(conn, config.connect_timeout_s))
        if generation == self._generation:
            # Not invalidated while listing: a listing older than the change is not kept.
            self._tools[key] = (target.resolved.fingerprint(), tools)
        return tools

    async def call_tool(
        self,
        config: McpServerConfig,
        secrets: Mapping[str, str],
        tool_name: str,
        arguments: dict[str, Any],
        timeout_s: float | None = None,
    ) -> McpCallResult:
        """Calls ``tool_name`` (the server's raw name) and maps its result; never raises
        for a failure of the server or the call, which becomes an error result instead.

        ``timeout_s`` overrides the server's ``call_timeout_s`` for this call.
        """
        started = time.monotonic()
        limit = timeout_s if timeout_s is not None else config.call_timeout_s
        # Error texts reach the model and the tool call row: no secret in any form.
        redact = redactor(secrets)

        def failed(outcome: CallOutcome, message: str) -> McpCallResult:
            message = redact.bounded(message)
            return McpCallResult(
                is_error=True,
                result={"error": message},
                error=message,
                outcome=outcome,
                duration_s=time.monotonic() - started,
            )

        try:
            raw = await self._guarded(
                _Target.of(config, secrets),
                lambda conn: call_tool(conn, tool_name, arguments, limit),
            )
        except (MissingSecretError, InvalidArgument, PermissionDenied) as exc:
            return failed("config_error", exc.message)
        except CircuitOpenError as exc:
            return failed("circuit_open", exc.message)
        except McpTimeoutError as exc:
            return failed("timeout", exc.message)
        except McpUnavailableError as exc:
            return failed("unavailable", exc.message)
        except McpProtocolError as exc:
            return failed("protocol_error", exc.message)
        mapped = map_call_result(raw, max_inline_bytes=self._max_inline_bytes)
        message = sent_size = None
        if raw.is_error:
            # A server's error may quote the secrets it was given, and be megabytes.
            mapped, message, sent_size = redacted_error(mapped, redact)
        return McpCallResult(
            is_error=bool(raw.is_error),
            result=mapped,
            error=message,
            outcome="tool_error" if raw.is_error else "ok",
            duration_s=time.monotonic() - started,
            sent_size_bytes=sent_size,
        )

    async def test_server(
        self, config: McpServerConfig, secrets: Mapping[str, str]
    ) -> McpServerProbe:
        """Connects a fresh session (not the pooled one, no breaker), lists tools, closes.

        Raises like :meth:`list_tools`; the caller reports failures in its response.
        """
        started = time.monotonic()
        conn = self._new_connection(_Target.of(config, secrets))
        owner = self._spawn_owner(conn)
        try:
            await conn.wait_ready()
            try:
                listing = await list_tools(conn, config.connect_timeout_s)
            except SessionLost as lost:
                reason = await why_lost(conn, lost)
                raise McpUnavailableError(
                    f"MCP server {conn.label}: session lost while listing tools: {reason}"
                ) from None
            info = conn.server_info
            return McpServerProbe(
                tools=listing.tools,
                left_out=listing.left_out,
                server_name=info.name if info else "",
                server_version=info.version if info else "",
                duration_s=time.monotonic() - started,
            )
        finally:
            conn.close()
            # Shielded: a cancelled caller leaves the owner closing (aclose still awaits it).
            await asyncio.shield(owner)

    def breaker_state(self, project_id: str, name: str) -> BreakerState:
        """``closed``, ``open`` or ``half_open`` (``closed`` for a server never used)."""
        breaker = self._breakers.get((project_id, name))
        return breaker.state if breaker is not None else "closed"

    def breaker(self, project_id: str, name: str) -> CircuitBreaker | None:
        """The server's breaker on this replica (its state and health), ``None`` if the
        server has not been used since its configuration last changed. Read only."""
        return self._breakers.get((project_id, name))

    def health(self) -> tuple[list[str], int]:
        """Every known server's breaker state, and the live sessions (metrics; no I/O)."""
        sessions = sum(1 for conn in list(self._connections.values()) if conn.connected)
        return [breaker.state for breaker in list(self._breakers.values())], sessions

    def is_connected(self, project_id: str, name: str) -> bool:
        """Whether a live, initialized session to the server exists now."""
        conn = self._connections.get((project_id, name))
        return conn is not None and conn.connected

    def invalidate(self, project_id: str, server: str | None = None) -> None:
        """Forgets cached tool lists, sessions and breakers of one server or the whole project.

        Sessions are retired: calls in flight finish, new calls open a new session. The
        breakers start closed again, so a fixed configuration is tried at once.
        """

        self._generation += 1

        def matching(keys: Iterable[Key]) -> list[Key]:
            return [k for k in keys if k[0] == project_id and server in (None, k[1])]

        for key in matching(self._tools):
            del self._tools[key]
        for key in matching(self._breakers):
            del self._breakers[key]
        for key in matching(self._connections):
            self._connections.pop(key).retire()

    async def listen(self, listener: Listener) -> None:
        """Invalidates a project whenever a replica NOTIFYs a change of its servers/secrets.

        After the listener reconnects (notifications may have been lost) everything is
        invalidated.
        """
        await listener.subscribe(CHANGES_CHANNEL, self._on_change)
        listener.add_reconnect_callback(self._invalidate_all)

    async def aclose(self) -> None:
        """Closes every session and waits for the owners: no child process survives."""
        self._closed = True
        for conn in self._connections.values():
            conn.close()
        self._connections.clear()
        self._tools.clear()
        owners = list(self._owners)
        if owners:
            _, pending = await asyncio.wait(owners, timeout=15.0)
            for task in pending:
                # Only a transport ignoring its own bounded shutdown gets here.
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=5.0)

    # -- internals ---------------------------------------------------------------------

    def _on_change(self, notification: Notification) -> None:
        self.invalidate(notification.payload)

    def _invalidate_all(self) -> None:
        for project_id in {k[0] for k in (*self._tools, *self._connections)}:
            self.invalidate(project_id)

    def _spawn_owner(self, conn: McpConnection) -> asyncio.Task[None]:
        # Owned by the pool: aclose() waits for every owner, so no process outlives it.
        owner = asyncio.create_task(conn.run(), name=f"mcp-session-{conn.label}")
        self._owners.add(owner)
        owner.add_done_callback(self._owners.discard)
        return owner

    def _breaker(self, key: Key) -> CircuitBreaker:
        breaker = self._breakers.get(key)
        if breaker is None:
            breaker = self._breakers[key] = self._new_breaker()
        return breaker

    async def _guarded(
        self, target: _Target, operation: Callable[[McpConnection], Awaitable[T]]
    ) -> T:
        """Runs ``operation(connection)`` behind the breaker, with one safe retry."""
        config = target.config
        label = f"{config.project_id}/{config.name}"
        breaker = self._breaker((config.project_id, config.name))
        if not breaker.allow():
            raise CircuitOpenError(
                f"MCP server {label} is failing; circuit open, next try in "
                f"{breaker.retry_after_s():.1f} s"
            )
        try:
            try:
                result = await self._attempt(target, operation)
            except _Retryable as retry:
                log.info("mcp_call_retried", server=label, reason=retry.reason)
                result = await self._attempt(target, operation, last=True)
        except (McpUnavailableError, McpTimeoutError) as exc:
            breaker.record_failure(_shown(exc.message, target.secrets))
            raise
        except McpProtocolError as exc:
            # An error answer proves the server is up, not that it works: a server that
            # answers every call with an error must not keep its breaker closed.
            breaker.record_neutral()
            breaker.note_error(_shown(exc.message, target.secrets))
            raise
        except BaseException:
            breaker.record_neutral()
            raise
        breaker.record_success()
        return result

    async def _attempt(
        self,
        target: _Target,
        operation: Callable[[McpConnection], Awaitable[T]],
        *,
        last: bool = False,
    ) -> T:
        conn = self._current_connection(target)
        mark = SendMark()
        token = CURRENT_MARK.set(mark)
        # Counted from before the connect, so a retirement meanwhile does not abandon it.
        conn.acquire()
        try:
            try:
                await conn.wait_ready()
            except (McpUnavailableError, McpTimeoutError):
                self._drop(conn)
                raise
            return await operation(conn)
        except SessionLost as lost:
            self._drop(conn)
            reason = await why_lost(conn, lost)
            unsent = lost.unsent or not mark.sent or conn.refused
            if unsent and not last:
                raise _Retryable(reason) from None
            ran = "it did not run" if unsent else "it may or may not have run"
            raise McpUnavailableError(
                f"MCP server {conn.label}: session lost during the call ({ran}): {reason}"
            ) from None
        finally:
            conn.release()
            CURRENT_MARK.reset(token)

    def _current_connection(self, target: _Target) -> McpConnection:
        """The live connection for these settings, or a new one being opened."""
        if self._closed:
            raise McpUnavailableError("the MCP client pool is closed")
        key = (target.config.project_id, target.config.name)
        conn = self._connections.get(key)
        if conn is not None and not conn.alive:
            self._drop(conn)
            conn = None
        elif conn is not None and conn.fingerprint != target.resolved.fingerprint():
            # Changed configuration or secret: new calls get a new session.
            del self._connections[key]
            conn.retire()
            conn = None
        if conn is None:
            conn = self._new_connection(target)
            self._connections[key] = conn
            self._spawn_owner(conn)
        return conn

    def _new_connection(self, target: _Target) -> McpConnection:
        config = target.config
        # Checked at every start: the allowlist may have shrunk since the row was saved.
        check_stdio_allowed(config, self.stdio_allowlist)
        return McpConnection(
            (config.project_id, config.name),
            target.resolved,
            connect_timeout_s=config.connect_timeout_s,
            errlog=self._errlog,
            redact=redactor(target.secrets),
            egress=self.egress,
        )

    def _drop(self, conn: McpConnection) -> None:
        if self._connections.get(conn.key) is conn:
            del self._connections[conn.key]
        conn.close()


class _Retryable(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
