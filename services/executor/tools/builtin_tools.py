"""Built-in tools run inside the executor (``AGENTFLEET_EXECUTOR_BUILTIN_TOOLS=inprocess``).

A call of a built-in tool (the knowledge graph, create_subtasks) runs the toolpool's own
CallTool code in this process: the request the gRPC gateway sends
(:func:`~services.executor.tools.tool_gateway.call_tool_request`), handled by the toolpool's
servicer (:class:`~services.toolpool.server.ToolPoolServicer`: the run must be running in
the request's project, which is the run's; the tool must be in the run's whitelist at its
depth; ``project_id`` arguments are dropped; argument, timeout and result limits; the
tool's span and metrics), and its reply read as the gateway reads it
(:func:`~services.executor.tools.tool_gateway.tool_outcome`). A refusal reads as over gRPC:
``CODE: message``. Only the hop is gone: serialisation, HTTP/2 and the toolpool process.

A definition whose tools are all named exactly among the built-in and coordination tools
is resolved here too, by the toolpool's code (:func:`~services.toolpool.toolpool.resolve_static`)
and read as the gateway reads a ResolveTools reply: those names mean the same tools in every
project, so no catalog is read and no RPC made at a run's start. Any other resolution (a
glob, an MCP tool) and every other tool go to the toolpool over gRPC.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import asyncpg
import grpc
import structlog

from agentfleet.caller_errors import caller_error, internal_failure
from services.executor.tools.tool_gateway import (
    ResolvedTool,
    ToolCallRequest,
    ToolGateway,
    ToolOutcome,
    call_tool_request,
    failure,
    resolved_tools,
    tool_outcome,
)
from services.toolpool.builtin import BUILTIN_TOOLS
from services.toolpool.mcp import McpClientPool, McpServerStore, SecretStore
from services.toolpool.server import ToolPoolServicer, tool_definition
from services.toolpool.toolpool import ToolPool, resolve_static

log = structlog.get_logger(__name__)


class InProcessBuiltinTools:
    """A :class:`ToolGateway` that runs built-in tools here and sends the rest to
    ``toolpool`` (the gRPC gateway)."""

    def __init__(self, pool: asyncpg.Pool, toolpool: ToolGateway) -> None:
        self._toolpool = toolpool
        # The toolpool's own objects on this process's pool. Only built-in names reach
        # them: their MCP parts (sessions, server rows, secrets) are never used here.
        self._servicer = ToolPoolServicer(
            ToolPool(
                pool=pool,
                mcp=McpClientPool(),
                servers=McpServerStore(pool),
                secrets=SecretStore(pool),
            )
        )

    async def resolve(
        self, *, project_id: str, patterns: Sequence[str], depth: int
    ) -> list[ResolvedTool]:
        static = resolve_static(patterns, depth) if depth >= 0 else None
        if static is None:
            return await self._toolpool.resolve(
                project_id=project_id, patterns=patterns, depth=depth
            )
        # Through the reply's form, so the tools read exactly as over gRPC.
        return resolved_tools(tool_definition(spec) for spec in static)

    async def call(self, request: ToolCallRequest) -> ToolOutcome:
        if request.tool_name not in BUILTIN_TOOLS:
            return await self._toolpool.call(request)
        started = time.perf_counter()
        message = call_tool_request(request)
        if isinstance(message, str):
            return failure(message, started)
        try:
            reply = await self._servicer.CallTool(message, None)
        except Exception as exc:  # what the toolpool's server would answer with a status
            return failure(_status(exc), started)
        return tool_outcome(reply)


def _status(exc: Exception) -> str:
    """``CODE: message``, as the gRPC gateway reads the status the toolpool's server would
    send for ``exc``."""
    error = caller_error(exc, "CallTool")
    if error is not None:
        return f"{error.code.name}: {error.message}"
    return f"{grpc.StatusCode.INTERNAL.name}: {internal_failure(exc)}"
