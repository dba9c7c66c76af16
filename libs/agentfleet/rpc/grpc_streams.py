"""How agentfleet's server interceptors wrap handlers, and response streams that end quietly
when their caller goes away.

:class:`HandlerInterceptor` is the base of every interceptor that serves an RPC through a
wrapper of its handler (:func:`serving` builds the new handler).
:class:`StreamsClosedInTheirTask` is the server's outermost interceptor, which closes a
stream's generators in the RPC's own task; a wrapper generator inside it is made with
:func:`closed_with_the_rpc` to be closed there too.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextvars import ContextVar
from typing import Any

import grpc

# The generators of the current RPC's response stream, closed by StreamsClosedInTheirTask.
_rpc_generators: ContextVar[list[AsyncGenerator[Any, None]] | None] = ContextVar(
    "_rpc_generators", default=None
)


Stream = Callable[[Any, grpc.aio.ServicerContext], AsyncGenerator[Any, None]]
"""A response-streaming behavior written as an async generator."""


class HandlerInterceptor(grpc.aio.ServerInterceptor):
    """A server interceptor that may serve an RPC through a wrapper of its handler; what it
    does with each handler is :meth:`wrap`."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        method: str = handler_call_details.method  # type: ignore[attr-defined]
        return self.wrap(handler, method, handler_call_details)

    def wrap(
        self, handler: grpc.RpcMethodHandler, method: str, details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler:
        """The handler that serves ``method``: ``handler`` itself, or one :func:`serving` a
        wrapper of its behavior."""
        raise NotImplementedError


def serving(
    handler: grpc.RpcMethodHandler,
    behavior: Callable[..., Any],
    *,
    request_deserializer: Callable[[bytes], Any] | None = None,
) -> grpc.RpcMethodHandler:
    """A handler of the same kind as ``handler`` (unary, or response-streaming) and with its
    serializers, that serves ``behavior``; ``request_deserializer`` replaces its own."""
    make = (
        grpc.unary_stream_rpc_method_handler
        if handler.response_streaming
        else grpc.unary_unary_rpc_method_handler
    )
    return make(
        behavior,
        request_deserializer=request_deserializer or handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )


def closed_with_the_rpc(serve: Stream) -> Stream:
    """``serve`` with each stream it returns closed by :class:`StreamsClosedInTheirTask` in
    the RPC's own task (for a generator that wraps the handler's)."""

    def stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncGenerator[Any, None]:
        responses = serve(request, context)
        generators = _rpc_generators.get()
        if generators is not None:
            generators.append(responses)
        return responses

    return stream


class StreamsClosedInTheirTask(HandlerInterceptor):
    """Serves every response stream as a coroutine that writes the responses and closes the
    stream's generators itself, in the RPC's own task.

    grpc.aio iterates an async-generator handler, but when the caller cancels or its
    deadline passes mid-write it stops without closing it, and a wrapper generator (the
    OpenTelemetry one) drops the one inside it unclosed: the garbage collector then closes
    them in another task, where the context variables they set (the principal, structlog's
    scope, OpenTelemetry's context) cannot be reset, and errors are logged for a call
    nobody waits for. Outermost, this closes them all, outermost first, where they began.
    """

    def wrap(
        self, handler: grpc.RpcMethodHandler, method: str, details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler:
        if (
            handler.request_streaming
            or not handler.response_streaming
            or asyncio.iscoroutinefunction(handler.unary_stream)
        ):
            return handler
        return serving(handler, _written_in_the_rpc_task(handler.unary_stream))


def _written_in_the_rpc_task(
    behavior: Stream,
) -> Callable[[Any, grpc.aio.ServicerContext], Awaitable[None]]:
    async def stream(request: Any, context: grpc.aio.ServicerContext) -> None:
        generators: list[AsyncGenerator[Any, None]] = []
        # Each RPC runs in its own task (its own context copy): nothing to reset.
        _rpc_generators.set(generators)
        responses = behavior(request, context)
        try:
            async for response in responses:
                await context.write(response)
        finally:
            await responses.aclose()
            for generator in generators:
                await generator.aclose()

    return stream
