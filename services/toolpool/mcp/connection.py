"""One live MCP session and the task that owns its transport.

The SDK's transports and ``ClientSession`` are anyio context managers that must be entered
and exited in one task, so each session gets an owner task that opens the transport,
initializes, publishes the session, then waits until it is told to stop or the transport
ends (server process died, SSE stream dropped, streamable HTTP request failed) and closes
everything in order. Callers in other tasks use the published session concurrently: the
SDK multiplexes requests on it.

Two thin stream wrappers between the transport and the session tell the pool what it
needs: the read side sees the end of the transport (so a dead session is never handed out
again), the write side marks, per call, whether the request left this process (so a call
is retried only when it cannot have reached the server).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import math
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from typing import Any, Self, TextIO

import anyio
import httpx2
import mcp_types as types
import structlog
from mcp import StdioServerParameters
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from opentelemetry import propagate

from agentfleet.egress import EgressPolicy, guarded_transport, refusal_of
from agentfleet.mcp.jail import launcher_argv

from .errors import McpTimeoutError, McpUnavailableError
from .interpolate import ResolvedServer
from .limits import LimitedTransport, MessageLimit, MessageTooLarge
from .marks import CURRENT_MARK, note_session_refusal
from .redaction import Redactor, redactor
from .session import Re2ClientSession
from .stdio import stdio_transport

log = structlog.get_logger(__name__)

CLOSE_TIMEOUT_S = 5.0
CLIENT_INFO = types.Implementation(name="agentfleet-toolpool", version="0.1.0")


class McpConnection:
    """A session to one server with one resolved configuration, owned by :meth:`run`.

    Lifecycle: ``connecting`` -> ``ready`` -> ``ended``; :meth:`close` at any point.
    """

    def __init__(
        self,
        key: tuple[str, str],
        resolved: ResolvedServer,
        *,
        connect_timeout_s: float,
        errlog: TextIO | None = None,
        redact: Redactor | None = None,
        egress: EgressPolicy | None = None,
    ) -> None:
        self.key = key
        """(project_id, server name)."""
        self.label = f"{key[0]}/{key[1]}"
        self.resolved = resolved
        self.fingerprint = resolved.fingerprint()
        self._connect_timeout_s = connect_timeout_s
        self._errlog = errlog
        self.redact = redact if redact is not None else redactor(())
        """Removes secret values from a text (error messages, cut to their start)."""
        self._egress = egress if egress is not None else EgressPolicy()
        """Where the HTTP transports may connect (default: public addresses only)."""
        self._ready: asyncio.Future[Re2ClientSession] = asyncio.get_running_loop().create_future()
        # Nobody may be waiting when connecting fails (e.g. closed meanwhile): consume it.
        self._ready.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._finish = asyncio.Event()
        self._ended = asyncio.Event()
        self._scope: anyio.CancelScope | None = None
        self._closing = False
        self._retired = False
        self._users = 0
        self.session: Re2ClientSession | None = None
        self.server_info: types.Implementation | None = None
        self.end_error: BaseException | None = None
        """Why the transport ended, when it ended with an error (innermost exception)."""
        self._limit = MessageLimit(self._refuse_message)

    @property
    def alive(self) -> bool:
        """Connecting or ready, not retired, and neither told to stop nor ended."""
        return not self._retired and not self._finish.is_set() and not self._ended.is_set()

    def acquire(self) -> None:
        """A call starts using the session (see :meth:`retire`)."""
        self._users += 1

    def release(self) -> None:
        """A call is done with the session; closes a retired session after its last call."""
        self._users -= 1
        if self._retired and self._users == 0:
            self.close()

    def retire(self) -> None:
        """No new calls; close once the calls in flight are done (a config change must not
        cut them short)."""
        self._retired = True
        if self._users == 0:
            self.close()

    @property
    def connected(self) -> bool:
        return self.alive and self.session is not None

    @property
    def refused(self) -> bool:
        """The transport ended because a connection was refused: nothing reached the server."""
        return isinstance(self.end_error, httpx2.ConnectError | ConnectionRefusedError)

    async def wait_ready(self) -> Re2ClientSession:
        """The initialized session; :class:`McpUnavailableError` or :class:`McpTimeoutError`."""
        return await asyncio.shield(self._ready)

    @property
    def end_reason(self) -> str | None:
        """Why the transport ended, redacted and bounded; ``None`` when it ended cleanly."""
        return self.redact.bounded(describe(self.end_error)) if self.end_error else None

    async def wait_ended(self, timeout_s: float) -> bool:
        """Waits up to ``timeout_s`` for the owner to finish; whether it did."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self._ended.wait()
        return self._ended.is_set()

    def close(self) -> None:
        """Asks the owner to close the session (idempotent, returns at once)."""
        self._closing = True
        self._stop()

    def _refuse_message(self, error: MessageTooLarge) -> None:
        """A message past the limit: the session ends, and says why to whoever used it."""
        if self.end_error is None:
            self.end_error = error
            log.warning("mcp_message_refused", server=self.label, reason=str(error))
        self._fail(McpUnavailableError(f"cannot connect to MCP server {self.label}: {error}"))
        self._stop()

    def _stop(self) -> None:
        self._finish.set()
        if self.session is None and self._scope is not None:
            # Still connecting: nothing to close gracefully, abandon the attempt.
            self._scope.cancel()

    async def run(self) -> None:
        """The owner task: connect, publish, wait, close. Never raises (but cancellation)."""
        try:
            with anyio.CancelScope() as scope:
                self._scope = scope
                scope.deadline = anyio.current_time() + self._connect_timeout_s
                async with AsyncExitStack() as stack:
                    read, write = await stack.enter_async_context(self._transport())
                    session = await stack.enter_async_context(
                        Re2ClientSession(
                            _WatchedReadStream(read, self._finish.set),
                            _MarkingWriteStream(write),
                            client_info=CLIENT_INFO,
                        )
                    )
                    result = await session.initialize()
                    scope.deadline = math.inf
                    self.session = session
                    self.server_info = result.server_info
                    if not self._ready.done():
                        self._ready.set_result(session)
                    await self._finish.wait()
                    # Closing is bounded: a stuck server cannot hold the owner forever.
                    scope.deadline = anyio.current_time() + CLOSE_TIMEOUT_S
            if not self._ready.done():
                if self._closing:
                    self._fail(
                        McpUnavailableError(f"MCP server {self.label}: closed while connecting")
                    )
                else:
                    self._fail(
                        McpTimeoutError(
                            f"MCP server {self.label}: no session within the connect timeout "
                            f"of {self._connect_timeout_s:g} s"
                        )
                    )
        except Exception as exc:
            # A refused message ended it first; what the transport raised then is its echo.
            self.end_error = self.end_error or innermost(exc)
            reason = self.redact.bounded(describe(exc))
            if not self._ready.done():
                self._fail(
                    McpUnavailableError(f"cannot connect to MCP server {self.label}: {reason}")
                )
            else:
                log.info("mcp_session_ended", server=self.label, reason=reason)
        finally:
            # Also when cancelled from outside (aclose's last resort): nobody waits forever.
            self._fail(McpUnavailableError(f"MCP server {self.label}: session closed"))
            self._finish.set()
            self._ended.set()

    def _fail(self, exc: Exception) -> None:
        if not self._ready.done():
            self._ready.set_exception(exc)

    def _transport(self) -> AbstractAsyncContextManager[tuple[Any, Any]]:
        resolved = self.resolved
        if resolved.transport == "stdio":
            assert resolved.command is not None
            # Through the launcher: no fd beyond stdio, no capability, no new privileges.
            # The SDK gives the child only its minimal variables (PATH, HOME, ...) plus
            # ``env``: nothing of this process's environment (database URL, tokens, keys).
            launcher, *launcher_args = launcher_argv(stdio_command(resolved.command), resolved.args)
            params = StdioServerParameters(
                command=launcher, args=launcher_args, env=dict(resolved.env)
            )
            return stdio_transport(params, self._errlog or sys.stderr, self._limit)
        assert resolved.url is not None
        if resolved.transport == "sse":
            return sse_client(
                resolved.url,
                headers=dict(resolved.headers),
                timeout=self._connect_timeout_s,
                httpx_client_factory=functools.partial(
                    _traced_http_client, egress=self._egress, limit=self._limit
                ),
            )
        return _streamable_http(
            resolved.url, resolved.headers, self._connect_timeout_s, self._egress, self._limit
        )


@contextlib.asynccontextmanager
async def _streamable_http(
    url: str,
    headers: dict[str, str],
    connect_timeout_s: float,
    egress: EgressPolicy,
    limit: MessageLimit,
) -> AsyncIterator[tuple[Any, Any]]:
    # The per-call limit bounds reads; an httpx read timeout would cut long calls short.
    timeout = httpx2.Timeout(connect_timeout_s, read=None)
    client = _traced_http_client(headers=dict(headers), timeout=timeout, egress=egress, limit=limit)
    async with (
        client,
        # Events are bounded by the client's transport (limits.py), as every other body is.
        streamable_http_client(url, http_client=client, max_sse_event_size=None) as streams,
    ):
        yield streams


async def _inject_trace_context(request: httpx2.Request) -> None:
    # The SDK sends each request from a task that carries the caller's context, so the
    # current span here is the caller's (or the SDK's span under it).
    propagate.inject(request.headers)


def _traced_http_client(
    headers: dict[str, str] | None = None,
    timeout: httpx2.Timeout | None = None,
    auth: httpx2.Auth | None = None,
    *,
    egress: EgressPolicy,
    limit: MessageLimit,
) -> httpx2.AsyncClient:
    """An HTTP client that adds W3C ``traceparent`` to every request it sends, connects
    only where ``egress`` allows, at every connect (redirects included), with no proxy from
    the environment, and refuses a response body or event past ``limit``."""
    return httpx2.AsyncClient(
        # Uncompressed bodies only: the limit counts bytes before httpx decodes them.
        headers={**(headers or {}), "Accept-Encoding": "identity"},
        timeout=timeout if timeout is not None else httpx2.Timeout(30.0, read=300.0),
        auth=auth,
        event_hooks={"request": [_inject_trace_context], "response": [note_session_refusal]},
        transport=LimitedTransport(guarded_transport(egress), limit),
        trust_env=False,
    )


class _StreamWrapper:
    """A transport stream seen through a wrapper: closing (or leaving) closes the inner one."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


class _WatchedReadStream(_StreamWrapper):
    """The transport's read stream, calling ``on_end`` once it ends or is closed."""

    def __init__(self, inner: Any, on_end: Callable[[], None]) -> None:
        super().__init__(inner)
        self._on_end = on_end

    @property
    def last_context(self) -> contextvars.Context | None:
        # The dispatcher restores the sender's context from here (HTTP transports).
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._on_end()
            raise

    def __aiter__(self) -> _WatchedReadStream:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        self._on_end()
        await super().aclose()


class _MarkingWriteStream(_StreamWrapper):
    """The transport's write stream, marking the calling task's :class:`SendMark`."""

    async def send(self, item: Any) -> None:
        await self._inner.send(item)
        mark = CURRENT_MARK.get()
        if mark is not None:
            mark.sent = True


def innermost(exc: BaseException) -> BaseException:
    """The first leaf of nested exception groups (the task-group wrapping hides the cause)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def describe(exc: BaseException) -> str:
    leaf = innermost(exc)
    refused = refusal_of(leaf)
    if refused is not None:
        return str(refused)
    text = str(leaf)
    return f"{type(leaf).__name__}: {text}" if text else type(leaf).__name__


# A stdio server configured as plain "python" runs on the toolpool's own interpreter, so
# Python MCP servers that use the installed SDK work whatever PATH the toolpool has.
_PYTHON_ALIASES = frozenset({"python", "python3"})


def stdio_command(command: str) -> str:
    """The executable to start for a stdio server's ``command``."""
    return sys.executable if command in _PYTHON_ALIASES else command
