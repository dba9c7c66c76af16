"""Channels to agentfleet services: bearer token and trace context on every call.

One channel per (process, address) is kept and reused; gRPC multiplexes calls over it, so
there is no per-call connection setup. A service's own token comes from
AGENTFLEET_SERVICE_TOKEN or, to rotate it without a restart, from the file named by
AGENTFLEET_SERVICE_TOKEN_FILE (:class:`TokenFile`, re-read when the file changes).
Channels are TLS when given :class:`agentfleet.rpc.tls.ClientTls` (see
:func:`agentfleet.rpc.tls.client_tls`), else plain text.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import grpc

from agentfleet.config import Settings
from agentfleet.rpc.client_tracing import tracing_interceptors
from agentfleet.rpc.grpc_server import MAX_MESSAGE_BYTES
from agentfleet.rpc.tls import ClientTls, channel_credentials, client_tls

TOKEN_FILE_CHECK_INTERVAL_S = 1.0
"""A changed token file is used by calls starting at most this long after the change."""


class TokenSource(Protocol):
    def current(self) -> str:
        """The bearer token to send now."""
        ...


class TokenFile:
    """A token read from a file (a mounted Kubernetes Secret) and re-read when it changes.

    The file's identity (inode, size, mtime) is checked at most once per
    :data:`TOKEN_FILE_CHECK_INTERVAL_S`, so a call costs a clock read; a Secret update
    (an atomic symlink swap) is picked up within that interval. A file that is briefly
    missing or empty mid-update keeps the last token.
    """

    def __init__(self, path: Path, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._path = path
        self._clock = clock
        self._identity: tuple[int, int, int] | None = None
        self._token = ""
        self._checked_at = -TOKEN_FILE_CHECK_INTERVAL_S
        self._refresh()

    def current(self) -> str:
        now = self._clock()
        if now - self._checked_at >= TOKEN_FILE_CHECK_INTERVAL_S:
            self._checked_at = now
            self._refresh()
        return self._token

    def _refresh(self) -> None:
        try:
            stat = os.stat(self._path)
            identity = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
            if identity == self._identity:
                return
            token = self._path.read_text().strip()
        except OSError:
            return
        if token:
            self._identity = identity
            self._token = token


class _StaticToken:
    def __init__(self, token: str) -> None:
        self._token = token

    def current(self) -> str:
        return self._token


def service_token_source(settings: Settings) -> TokenSource | None:
    """This service's own credential: AGENTFLEET_SERVICE_TOKEN_FILE or _TOKEN, or None."""
    if settings.service_token_file is not None:
        return TokenFile(settings.service_token_file)
    if settings.service_token is not None:
        return _StaticToken(settings.service_token)
    return None


class _Bearer:
    """Sends the token source's current token as ``authorization: Bearer`` on each call."""

    def __init__(self, token: TokenSource) -> None:
        self._token = token

    async def _intercept(
        self, continuation: Callable[..., Any], details: grpc.aio.ClientCallDetails, request: Any
    ) -> Any:
        metadata = grpc.aio.Metadata(*(details.metadata or ()))
        metadata.add("authorization", f"Bearer {self._token.current()}")
        with_token = grpc.aio.ClientCallDetails(
            details.method, details.timeout, metadata, details.credentials, details.wait_for_ready
        )
        return await continuation(with_token, request)


# grpc.aio files an interceptor under the first kind it implements only, so each kind of
# call needs its own interceptor object.
class _UnaryBearer(_Bearer, grpc.aio.UnaryUnaryClientInterceptor):
    intercept_unary_unary = _Bearer._intercept


class _StreamBearer(_Bearer, grpc.aio.UnaryStreamClientInterceptor):
    intercept_unary_stream = _Bearer._intercept


def open_channel(
    address: str,
    *,
    token: str | TokenSource | None = None,
    tls: ClientTls | None = None,
    options: Sequence[tuple[str, Any]] = (),
) -> grpc.aio.Channel:
    """A channel with tracing and, if given, a bearer token (a fixed string, or a source
    asked on every call, e.g. a :class:`TokenFile`): TLS with ``tls``, else plain text
    (mesh or loopback). ``options`` are added to the channel's gRPC options."""
    interceptors: list[grpc.aio.ClientInterceptor] = tracing_interceptors()
    if token:
        source = _StaticToken(token) if isinstance(token, str) else token
        interceptors += [_UnaryBearer(source), _StreamBearer(source)]
    channel_options = [
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        *options,
    ]
    if tls is not None:
        return grpc.aio.secure_channel(
            address, channel_credentials(tls), interceptors=interceptors, options=channel_options
        )
    return grpc.aio.insecure_channel(address, interceptors=interceptors, options=channel_options)


def service_channel(settings: Settings, called: str) -> grpc.aio.Channel:
    """This service's channel to another (``toolpool``, ``executor``): its own token, and
    TLS when AGENTFLEET_TLS_CA_FILE is set."""
    return open_channel(
        settings.addresses[called], token=service_token_source(settings), tls=client_tls(settings)
    )
