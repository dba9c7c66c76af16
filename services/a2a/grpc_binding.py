"""The A2A gRPC binding: the SDK's ``GrpcHandler`` (``lf.a2a.v1.A2AService``) over the same
request handler as JSON-RPC, on its own port (AGENTFLEET_A2A_GRPC_BINDING_PORT, 50057).

gRPC has no URL path to name the agent: the request's ``tenant`` does, as
``{project}/{agent}`` (the Agent Card's GRPC interface carries it, and the SDK's client sends
it with every call). Every call is admitted like an HTTP request before the SDK reads it:
the ``authorization: Bearer`` metadata must be a token that reaches an EXTERNAL agent of
that project (UNAUTHENTICATED, PERMISSION_DENIED, NOT_FOUND otherwise), by the registry's
own checks (:meth:`Backend.external_agent`). Messages are bounded by
AGENTFLEET_A2A_MAX_BODY_BYTES like HTTP bodies.
"""

from __future__ import annotations

import contextvars
from collections.abc import AsyncIterable, Awaitable, Callable
from typing import Any, TypeVar

import grpc
from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.grpc_handler import GrpcHandler
from a2a.types import a2a_pb2_grpc
from google.protobuf import message as pb_message

from services.a2a.backend import AccessDenied, Backend, Caller, Unavailable
from services.a2a.handler import AgentRequestHandler

T = TypeVar("T")
_HTTP_TO_GRPC = {
    401: grpc.StatusCode.UNAUTHENTICATED,
    403: grpc.StatusCode.PERMISSION_DENIED,
    404: grpc.StatusCode.NOT_FOUND,
}
_caller: contextvars.ContextVar[Caller] = contextvars.ContextVar("a2a_grpc_caller")
"""The admitted caller of the call being served (set by ``_admit``, read right after by
``_build_call_context``, in the same task)."""


def tenant_of(project_id: str, agent_name: str) -> str:
    """The ``tenant`` naming an agent on the gRPC binding."""
    return f"{project_id}/{agent_name}"


class AgentGrpcHandler(GrpcHandler):
    """``GrpcHandler`` with agentfleet's admission in front of every call.

    Overrides the SDK's two call wrappers (``_handle_unary``, ``_handle_stream``; a2a-sdk is
    pinned at 1.3.0) because admission is asynchronous and must run before the handler."""

    def __init__(self, backend: Backend) -> None:
        super().__init__(AgentRequestHandler(backend))
        self._backend = backend

    async def _handle_unary(
        self,
        request: pb_message.Message,
        context: grpc.aio.ServicerContext,
        handler_func: Callable[[ServerCallContext], Awaitable[T]],
        default_response: T,
    ) -> T:
        await self._admit(request, context)
        return await super()._handle_unary(request, context, handler_func, default_response)

    async def _handle_stream(
        self,
        request: pb_message.Message,
        context: grpc.aio.ServicerContext,
        handler_func: Callable[[ServerCallContext], AsyncIterable[T]],
    ) -> AsyncIterable[T]:
        await self._admit(request, context)
        async for item in super()._handle_stream(request, context, handler_func):
            yield item

    def _build_call_context(
        self, context: grpc.aio.ServicerContext, request: pb_message.Message
    ) -> ServerCallContext:
        server_context = super()._build_call_context(context, request)
        server_context.state["caller"] = _caller.get()
        return server_context

    async def _admit(self, request: pb_message.Message, context: grpc.aio.ServicerContext) -> None:
        """Sets the caller on ``context``, or aborts the call."""
        project_id, sep, agent_name = str(getattr(request, "tenant", "")).partition("/")
        if not sep or not project_id or not agent_name or "/" in agent_name:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                "tenant: must be {project}/{agent}, as the agent's card names it",
            )
        token = _bearer(context.invocation_metadata() or ())
        if token is None:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "a bearer token is required")
        caller = Caller(project_id=project_id, agent_name=agent_name, token=str(token))
        try:
            await self._backend.external_agent(caller)
        except AccessDenied as exc:
            code = _HTTP_TO_GRPC.get(exc.http_status, grpc.StatusCode.PERMISSION_DENIED)
            await context.abort(code, exc.message)
        except Unavailable as exc:
            await context.abort(
                grpc.StatusCode.UNAVAILABLE, f"agentfleet unavailable ({exc.code.name})"
            )
        _caller.set(caller)


def _bearer(metadata: Any) -> str | None:
    for key, value in metadata:
        if str(key).lower() == "authorization":
            scheme, _, token = str(value).partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
    return None


async def start_grpc_binding(
    backend: Backend, *, host: str, port: int, max_message_bytes: int, max_concurrent: int
) -> tuple[grpc.aio.Server, int]:
    """The A2A gRPC server, started; and the port it listens on (0 = a free one)."""
    server = grpc.aio.server(
        maximum_concurrent_rpcs=max_concurrent,
        options=[
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", 16 * 1024 * 1024),
        ],
    )
    a2a_pb2_grpc.add_A2AServiceServicer_to_server(AgentGrpcHandler(backend), server)
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise OSError(f"cannot listen on {host}:{port} for the A2A gRPC binding")
    await server.start()
    return server, bound
