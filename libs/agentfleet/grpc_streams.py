"""Response streams that end quietly when their caller goes away.

See :class:`StreamsClosedInTheirTask`: the server's outermost interceptor, which closes a
stream's generators in the RPC's own task; a wrapper generator inside it registers itself
with :func:`close_with_the_rpc` to be closed there too.
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


def close_with_the_rpc(generator: AsyncGenerator[Any, None]) -> None:
    generators = _rpc_generators.get()
    if generators is not None:
        generators.append(generator)


class StreamsClosedInTheirTask(grpc.aio.ServerInterceptor):
    """Serves every response stream as a coroutine that writes the responses and closes the
    stream's generators itself, in the RPC's own task.

    grpc.aio iterates an async-generator handler, but when the caller cancels or its
    deadline passes mid-write it stops without closing it, and a wrapper generator (the
    OpenTelemetry one) drops the one inside it unclosed: the garbage collector then closes
    them in another task, where the context variables they set (the principal, structlog's
    scope, OpenTelemetry's context) cannot be reset, and errors are logged for a call
    nobody waits for. Outermost, this closes them all, outermost first, where they began.
    """

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if (
            handler is None
            or handler.request_streaming
            or not handler.response_streaming
            or asyncio.iscoroutinefunction(handler.unary_stream)
        ):
            return handler
        return grpc.unary_stream_rpc_method_handler(
            _written_in_the_rpc_task(handler.unary_stream),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


def _written_in_the_rpc_task(
    behavior: Callable[..., AsyncGenerator[Any, None]],
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
