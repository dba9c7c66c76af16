"""How the agent loop reaches tools: the :class:`ToolGateway` port, the ToolPool gRPC
adapter, and an in-memory fake for tests and benchmarks.

Errors::

    ToolResolutionError (FailedPrecondition)   the run's tool patterns cannot be resolved

A failed *call* is never an exception: it is a :class:`ToolOutcome` with ``is_error`` set,
which the loop hands to the model as data (STYLE "tool failures are data for the model").
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import grpc
from google.protobuf import struct_pb2

from agentfleet.errors import FailedPrecondition
from agentfleet.events import tool_source_name
from agentfleet.structs import struct_dict
from agentfleet.timestamps import duration_proto
from agentfleet.v1 import toolpool_pb2, toolpool_pb2_grpc


class ToolResolutionError(FailedPrecondition):
    """The definition's tools cannot be resolved (an exact name matches no tool)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ResolvedTool:
    """A tool the model may call, as ToolPool resolved it."""

    name: str
    description: str
    parameters: dict[str, Any]
    """JSON Schema of the arguments object."""
    source: str
    """Stored form: builtin, mcp:<server> or executor."""
    executed_by_executor: bool = False
    """Coordination tools run by the executor itself, not by CallTool."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCallRequest:
    """One call of a tool on behalf of a run."""

    project_id: str
    run_id: str
    tool_call_id: str
    tool_name: str
    arguments: dict[str, Any]
    timeout_s: float | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolOutcome:
    """What a call produced, success or not."""

    result: dict[str, Any] | None
    is_error: bool = False
    error: str = ""
    duration_ms: int = 0
    failed: bool = False
    """True when the call itself failed (transport, refusal) rather than the tool reporting an
    error in its result: the tool call row is then ``failed`` instead of ``completed``."""


class ToolGateway(Protocol):
    """Resolves and calls tools for runs."""

    async def resolve(
        self, *, project_id: str, patterns: Sequence[str], depth: int
    ) -> list[ResolvedTool]:
        """The tools ``patterns`` name; :class:`ToolResolutionError` naming missing tools."""
        ...

    async def call(self, request: ToolCallRequest) -> ToolOutcome:
        """Calls one tool; never raises for a tool or transport failure (cancellation does)."""
        ...


CONNECT_WAIT_S = 5.0
"""How long a tool call waits for a disconnected ToolPool channel to connect again."""


class GrpcToolGateway:
    """ToolPool over gRPC on a channel the caller owns and reuses for every call.

    A call made while the channel is not connected (the toolpool restarting) first waits up
    to ``connect_wait_s`` for it to connect: gRPC would otherwise fail it at once with
    UNAVAILABLE without sending it, and the model would spend a step on the error. Nothing
    is retried after the request was sent (a tool must never run twice), so a toolpool dying
    under a call is answered to the model as a failed call.
    """

    def __init__(
        self, channel: grpc.aio.Channel, *, connect_wait_s: float = CONNECT_WAIT_S
    ) -> None:
        self._channel = channel
        self._connect_wait_s = connect_wait_s
        self._stub = toolpool_pb2_grpc.ToolPoolServiceStub(channel)

    async def _wait_connected(self) -> None:
        state = self._channel.get_state(try_to_connect=True)
        if state is grpc.ChannelConnectivity.READY:
            return
        # Not ready: the call itself fails (UNAVAILABLE, to the model) if this times out.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self._connect_wait_s):
                await self._channel.channel_ready()

    async def resolve(
        self, *, project_id: str, patterns: Sequence[str], depth: int
    ) -> list[ResolvedTool]:
        if not patterns:
            return []
        try:
            reply = await self._stub.ResolveTools(
                toolpool_pb2.ResolveToolsRequest(
                    project_id=project_id, patterns=list(patterns), depth=depth
                )
            )
        except grpc.aio.AioRpcError as exc:
            raise ToolResolutionError(
                f"cannot resolve tools {list(patterns)}: {exc.details() or exc.code().name}"
            ) from exc
        return resolved_tools(reply.tools)

    async def call(self, request: ToolCallRequest) -> ToolOutcome:
        started = time.perf_counter()
        message = call_tool_request(request)
        if isinstance(message, str):
            return failure(message, started)
        try:
            await self._wait_connected()
            reply = await self._stub.CallTool(message)
        except grpc.aio.AioRpcError as exc:
            return failure(f"{exc.code().name}: {exc.details()}", started)
        return tool_outcome(reply)


def resolved_tools(tools: Iterable[toolpool_pb2.ToolDefinition]) -> list[ResolvedTool]:
    """The tools of a ResolveTools reply as the executor uses them."""
    return [
        ResolvedTool(
            name=tool.name,
            description=tool.description,
            parameters=struct_dict(tool.parameters),
            source=tool_source_name(tool.source) or "builtin",
            executed_by_executor=tool.executed_by == toolpool_pb2.TOOL_EXECUTOR_EXECUTOR,
        )
        for tool in tools
    ]


def call_tool_request(request: ToolCallRequest) -> toolpool_pb2.CallToolRequest | str:
    """The CallTool request of a call (the arguments a protobuf Struct, read back by
    :func:`~agentfleet.structs.struct_dict`, whole numbers whole); why not when the arguments
    are not a JSON object."""
    arguments = struct_pb2.Struct()
    try:
        arguments.update(request.arguments)
    except (ValueError, TypeError) as exc:
        return f"arguments are not a JSON object: {exc}"
    message = toolpool_pb2.CallToolRequest(
        project_id=request.project_id,
        run_id=request.run_id,
        tool_call_id=request.tool_call_id,
        tool_name=request.tool_name,
        arguments=arguments,
    )
    if request.timeout_s is not None:
        message.timeout.CopyFrom(duration_proto(request.timeout_s))
    return message


def tool_outcome(reply: toolpool_pb2.CallToolResponse) -> ToolOutcome:
    """The outcome a CallTool reply carries."""
    return ToolOutcome(
        result=struct_dict(reply.result),
        is_error=reply.is_error,
        error=reply.error_message,
        duration_ms=reply.duration.ToMilliseconds(),
        failed=reply.failed,
    )


def failure(error: str, started: float) -> ToolOutcome:
    """A call that failed (transport, refusal) ``error``, after what it took since ``started``."""
    elapsed = int((time.perf_counter() - started) * 1000)
    return ToolOutcome(
        result={"error": error}, is_error=True, error=error, duration_ms=elapsed, failed=True
    )


ToolFunction = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


@dataclass(kw_only=True, slots=True)
class InMemoryToolGateway:
    """A fake ToolPool: tools are async Python functions. Exceptions become failed calls."""

    tools: dict[str, ToolFunction] = field(default_factory=dict)
    schemas: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    calls: list[ToolCallRequest] = field(default_factory=list)

    async def resolve(
        self, *, project_id: str, patterns: Sequence[str], depth: int
    ) -> list[ResolvedTool]:
        missing = [p for p in patterns if not _is_glob(p) and p not in self.tools]
        if missing:
            raise ToolResolutionError(f"unknown tools: {', '.join(missing)}")
        names = sorted({n for p in patterns for n in self.tools if fnmatch.fnmatchcase(n, p)})
        return [
            ResolvedTool(
                name=name,
                description=f"test tool {name}",
                parameters=self.schemas.get(name, {"type": "object"}),
                source="builtin",
            )
            for name in names
        ]

    async def call(self, request: ToolCallRequest) -> ToolOutcome:
        self.calls.append(request)
        started = time.perf_counter()
        try:
            result = await self.tools[request.tool_name](request.arguments)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return failure(f"{type(exc).__name__}: {exc}", started)
        elapsed = int((time.perf_counter() - started) * 1000)
        return ToolOutcome(result=result, duration_ms=elapsed)


def _is_glob(pattern: str) -> bool:
    return any(ch in pattern for ch in "*?[")
