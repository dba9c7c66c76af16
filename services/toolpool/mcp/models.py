"""Values of the MCP side of the toolpool: server configurations, secrets, tools, results."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal


@dataclass(frozen=True, kw_only=True, slots=True)
class SecretInfo:
    """A project secret without its value (values are write-only)."""

    name: str
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, kw_only=True, slots=True)
class McpToolInfo:
    """A tool as its MCP server lists it (raw name, no prefix)."""

    name: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class McpToolList:
    """A server's tools as the toolpool keeps them: bounded in number and size."""

    tools: list[McpToolInfo]
    left_out: str | None = None
    """Why some tools the server listed are not in ``tools`` (past the limits of a listing,
    :mod:`services.toolpool.mcp.calls`); ``None`` when none were left out."""


@dataclass(frozen=True, kw_only=True, slots=True)
class McpServerProbe:
    """What :meth:`McpClientPool.test_server` learned from a fresh session."""

    tools: list[McpToolInfo]
    left_out: str | None
    """As :attr:`McpToolList.left_out`."""
    server_name: str
    server_version: str
    duration_s: float
    """Time to connect, initialize and list tools."""


CallOutcome = Literal[
    "ok", "tool_error", "protocol_error", "timeout", "unavailable", "circuit_open", "config_error"
]


@dataclass(frozen=True, kw_only=True, slots=True)
class McpCallResult:
    """The result of one MCP tool call, always data (never an exception) for the model.

    ``result`` is the mapped content (see :mod:`services.toolpool.mcp.content`) when the
    server answered; ``{"error": message}`` otherwise.
    """

    is_error: bool
    result: dict[str, Any]
    error: str | None = None
    """Why the call failed (server message, timeout, connect error, missing secret)."""
    outcome: CallOutcome = "ok"
    """For spans and metrics: ``tool_error`` is the server's isError; the rest are ours."""
    duration_s: float = 0.0
    sent_size_bytes: int | None = None
    """The size of the server's result (JSON) when only its start was read: an error
    result larger than :data:`~services.toolpool.results.MAX_RESULT_BYTES`."""
