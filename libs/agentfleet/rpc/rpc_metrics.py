"""The gRPC interceptor that times every agentfleet RPC into ``rpc.server.call.duration``.

It lives with the serving code (it is a handler interceptor) and records through
:mod:`agentfleet.observability.metrics`, so observability never imports rpc.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator
from typing import Any

import grpc

from agentfleet.observability import metrics
from agentfleet.rpc.grpc_streams import HandlerInterceptor, Stream, closed_with_the_rpc, serving


class RpcMetricsInterceptor(HandlerInterceptor):
    """Records ``rpc.server.call.duration`` of every agentfleet RPC it is given (the
    OpenTelemetry gRPC instrumentation records spans only). Installed innermost, it times
    what the servicer does with admitted calls; health and reflection are left out."""

    def wrap(
        self, handler: grpc.RpcMethodHandler, method: str, details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler:
        if handler.request_streaming or method.startswith("/grpc."):
            return handler
        attributes = {"rpc.system.name": "grpc", "rpc.method": method.lstrip("/")}
        if not handler.response_streaming:
            return serving(handler, _timed_unary(handler.unary_unary, attributes))
        if asyncio.iscoroutinefunction(handler.unary_stream):
            return handler  # writes with context.write: nothing to wrap around
        return serving(handler, _timed_stream(handler.unary_stream, attributes))


def _status_of(exc: BaseException | None) -> str:
    if exc is None:
        return "OK"
    if isinstance(exc, asyncio.CancelledError | GeneratorExit):
        return "CANCELLED"
    code = getattr(exc, "code", None)  # an AgentFleetError carries its gRPC code
    return code.name if isinstance(code, grpc.StatusCode) else "INTERNAL"


@contextlib.contextmanager
def _timed(attributes: dict[str, str]) -> Iterator[None]:
    """Records the duration of the block as one RPC's, with the status it ended with."""
    started, failure = time.monotonic(), None
    try:
        yield
    except BaseException as exc:
        failure = exc
        raise
    finally:
        status = {"rpc.response.status_code": _status_of(failure)}
        metrics.record_rpc(time.monotonic() - started, {**attributes, **status})


def _timed_unary(
    behavior: Callable[..., Awaitable[Any]], attributes: dict[str, str]
) -> Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]:
    async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
        with _timed(attributes):
            return await behavior(request, context)

    return unary


def _timed_stream(behavior: Stream, attributes: dict[str, str]) -> Stream:
    @closed_with_the_rpc  # closed in the RPC's task (agentfleet.rpc.grpc_streams)
    async def stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncGenerator[Any, None]:
        with _timed(attributes):
            async with contextlib.aclosing(behavior(request, context)) as responses:
                async for response in responses:
                    yield response

    return stream
