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


class _BearerToken(grpc.aio.UnaryUnaryClientInterceptor, grpc.aio.UnaryStreamClientInterceptor):
    def __init__(self, token: str) -> None:
        self._header = ("authorization", f"Bearer {token}")

    def _with_token(self, details: grpc.aio.ClientCallDetails) -> grpc.aio.ClientCallDetails:
        metadata = grpc.aio.Metadata(*(details.metadata or ()))
        metadata.add(*self._header)
        return grpc.aio.ClientCallDetails(
            details.method, details.timeout, metadata, details.credentials, details.wait_for_ready
        )

    async def intercept_unary_unary(
        self, continuation: Callable[..., Any], details: grpc.aio.ClientCallDetails, request: Any
    ) -> Any:
        return await continuation(self._with_token(details), request)

    async def intercept_unary_stream(
        self, continuation: Callable[..., Any], details: grpc.aio.ClientCallDetails, request: Any
    ) -> Any:
        return await continuation(self._with_token(details), request)


def open_channel(address: str, *, token: str | None = None) -> grpc.aio.Channel:
    """An insecure channel (mesh or loopback) with tracing and, if given, a bearer token."""
    interceptors: list[grpc.aio.ClientInterceptor] = list(aio_client_interceptors())
    if token:
        interceptors.append(_BearerToken(token))
    return grpc.aio.insecure_channel(
        address,
        interceptors=interceptors,
        options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ],
    )
