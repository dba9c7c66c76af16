"""The console's gRPC side: one channel per service, shared by every session, with no
credential of its own; each call carries the signed-in user's token, so what a member or an
admin may do here is exactly what their token may do over gRPC."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
from google.protobuf.message import Message

from agentfleet.config import Settings
from agentfleet.rpc.clients import open_channel
from agentfleet.rpc.tls import client_tls
from agentfleet.structs import message_dict
from agentfleet.v1 import (
    dispatcher_pb2_grpc,
    executor_pb2_grpc,
    history_pb2_grpc,
    registry_pb2_grpc,
    toolpool_pb2_grpc,
)

UNARY_TIMEOUT_S = 30.0

HTTP_STATUS = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.FAILED_PRECONDITION: 409,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
    grpc.StatusCode.UNAVAILABLE: 503,
}


class CallFailed(Exception):
    """A service refused or failed a call: the canonical code and its first line."""

    def __init__(self, code: str, message: str, http_status: int) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.http_status = http_status

    @classmethod
    def of(cls, exc: grpc.aio.AioRpcError) -> CallFailed:
        details = (exc.details() or "").strip().splitlines()
        message = details[0] if details else exc.code().name.lower()
        return cls(exc.code().name, message, HTTP_STATUS.get(exc.code(), 502))


def to_json(message: Message) -> dict[str, Any]:
    """Proto3 JSON (enum names, RFC 3339 times, int64 as strings, defaults included, so the
    page need not know which zero a field omits)."""
    return message_dict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )


class Backend:
    def __init__(self, settings: Settings) -> None:
        tls = client_tls(settings)
        # No token on the channels: the caller's goes on each call (metadata below).
        self._channels = {
            name: open_channel(settings.addresses[name], tls=tls)
            for name in ("executor", "history", "toolpool", "dispatcher")
        }
        self.executor = executor_pb2_grpc.ExecutorServiceStub(self._channels["executor"])
        self.registry = registry_pb2_grpc.AgentRegistryServiceStub(self._channels["executor"])
        self.history = history_pb2_grpc.HistoryServiceStub(self._channels["history"])
        self.toolpool = toolpool_pb2_grpc.ToolPoolServiceStub(self._channels["toolpool"])
        self.dispatcher = dispatcher_pb2_grpc.DispatcherServiceStub(self._channels["dispatcher"])

    async def call(self, method: Any, request: Message, token: str) -> Any:
        try:
            return await method(request, metadata=_auth(token), timeout=UNARY_TIMEOUT_S)
        except grpc.aio.AioRpcError as exc:
            raise CallFailed.of(exc) from None

    async def stream(self, method: Any, request: Message, token: str) -> AsyncIterator[Any]:
        call = method(request, metadata=_auth(token))
        try:
            async for item in call:
                yield item
        except grpc.aio.AioRpcError as exc:
            raise CallFailed.of(exc) from None
        finally:
            call.cancel()

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()


def _auth(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)
