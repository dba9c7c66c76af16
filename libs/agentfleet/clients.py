"""Channels to agentfleet services: bearer token and trace context on every call.

One channel per (process, address) is kept and reused; gRPC multiplexes calls over it, so
there is no per-call connection setup.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
from opentelemetry.instrumentation.grpc import aio_client_interceptors

from agentfleet.grpc_server import MAX_MESSAGE_BYTES


def _with_token(details: grpc.aio.ClientCallDetails, header: tuple[str, str]) -> Any:
    metadata = grpc.aio.Metadata(*(details.metadata or ()))
    metadata.add(*header)
    return grpc.aio.ClientCallDetails(
        details.method, details.timeout, metadata, details.credentials, details.wait_for_ready
    )


# grpc.aio files an interceptor under the first kind it implements only, so each kind of
# call needs its own interceptor object.
class _UnaryBearer(grpc.aio.UnaryUnaryClientInterceptor):
    def __init__(self, header: tuple[str, str]) -> None:
        self._header = header

    async def intercept_unary_unary(
        self, continuation: Callable[..., Any], details: grpc.aio.ClientCallDetails, request: Any
    ) -> Any:
        return await continuation(_with_token(details, self._header), request)


class _StreamBearer(grpc.aio.UnaryStreamClientInterceptor):
    def __init__(self, header: tuple[str, str]) -> None:
        self._header = header

    async def intercept_unary_stream(
        self, continuation: Callable[..., Any], details: grpc.aio.ClientCallDetails, request: Any
    ) -> Any:
        return await continuation(_with_token(details, self._header), request)


def open_channel(address: str, *, token: str | None = None) -> grpc.aio.Channel:
    """An insecure channel (mesh or loopback) with tracing and, if given, a bearer token."""
    interceptors: list[grpc.aio.ClientInterceptor] = list(aio_client_interceptors())
    if token:
        header = ("authorization", f"Bearer {token}")
        interceptors += [_UnaryBearer(header), _StreamBearer(header)]
    return grpc.aio.insecure_channel(
        address,
        interceptors=interceptors,
        options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ],
    )
