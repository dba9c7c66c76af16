"""OpenTelemetry's gRPC client interceptors, with a caller's cancellation reaching the server.

OpenTelemetry's aio interceptors for calls with one response (unary-unary, stream-unary)
await the call's status inside the interceptor. When the caller's task is cancelled there,
the interceptor's task ends but nobody cancels the call itself, so the server keeps
running it to its end (opentelemetry-python-contrib#3271, open in 0.66b2). For the
executor that meant a cancelled run's CallTool went on in the toolpool until the MCP
server's ``call_timeout`` (at most an hour), holding one of the project's MCP call slots.
:class:`_CancelsUnaryUnary` wraps such an interceptor through gRPC's public interceptor
API only: it remembers the call the continuation started and cancels it when the caller
is cancelled. Calls with a response stream propagate cancellation already (measured); no
agentfleet RPC streams its requests, so the stream-unary interceptor is left as it is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from opentelemetry.instrumentation.grpc import aio_client_interceptors

Continuation = Callable[[grpc.aio.ClientCallDetails, Any], Awaitable[Any]]


class _CancelsUnaryUnary(grpc.aio.UnaryUnaryClientInterceptor):
    def __init__(self, inner: grpc.aio.UnaryUnaryClientInterceptor) -> None:
        self._inner = inner

    async def intercept_unary_unary(  # type: ignore[override]
        self,
        continuation: Continuation,
        client_call_details: grpc.aio.ClientCallDetails,
        request: Any,
    ) -> Any:
        started: list[grpc.aio.Call] = []

        async def remembered(details: grpc.aio.ClientCallDetails, sent: Any) -> Any:
            call = await continuation(details, sent)
            started.append(call)
            return call

        try:
            return await self._inner.intercept_unary_unary(remembered, client_call_details, request)
        except asyncio.CancelledError:
            for call in started:
                call.cancel()
            raise


def tracing_interceptors() -> list[grpc.aio.ClientInterceptor]:
    """OpenTelemetry's client interceptors (a span per call, trace context sent in the
    metadata), the unary-unary one wrapped so cancelling the caller cancels the call."""
    wrapped: list[grpc.aio.ClientInterceptor] = []
    for interceptor in aio_client_interceptors():
        if isinstance(interceptor, grpc.aio.UnaryUnaryClientInterceptor):
            wrapped.append(_CancelsUnaryUnary(interceptor))
        else:
            wrapped.append(interceptor)
    return wrapped
