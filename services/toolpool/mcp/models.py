"""Values of the MCP side of the toolpool: server configurations, secrets, tools, results."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

Transport = Literal["stdio", "sse", "streamable_http"]
TRANSPORTS: tuple[Transport, ...] = ("stdio", "sse", "streamable_http")

DEFAULT_CONNECT_TIMEOUT_S = 10.0
DEFAULT_CALL_TIMEOUT_S = 60.0


@dataclass(frozen=True, kw_only=True, slots=True)
class McpServerConfig:
    """One external MCP server of a project (a row of ``kb.mcp_servers``).

    ``args``, ``env``, ``url`` and ``headers`` keep their ``${NAME}`` references as
    configured; :func:`~services.toolpool.mcp.interpolate.resolve_server` fills them.
    """

    project_id: str
    name: str
    """Unique within the project: ``^[a-z0-9_-]{1,63}$``."""
    transport: Transport
    command: str | None = None
    """stdio: the executable to start."""
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    """stdio: set for the child on top of the SDK's minimal environment (PATH, HOME, ...)."""
    url: str | None = None
    """sse / streamable_http: the endpoint."""
    headers: dict[str, str] = field(default_factory=dict)
    tool_prefix: str | None = None
    """None: tools are exposed as ``<name>__<tool>``; ``""`` exposes raw tool names."""
    enabled: bool = True
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S
    call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S
    """Default limit of one tool call; a call may ask for another."""
    product_id: str | None = None
    """Product that installed the server (its rows go with it)."""
    # Output only: set by the store.
    id: str | None = None
    product_name: str | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None

    @property
    def exposed_prefix(self) -> str:
        """What the catalog puts before each tool name of this server."""
        return f"{self.name}__" if self.tool_prefix is None else self.tool_prefix

    def exposed_name(self, tool_name: str) -> str:
        """The catalog name of this server's tool ``tool_name``."""
        return self.exposed_prefix + tool_name


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
class McpServerProbe:
    """What :meth:`McpClientPool.test_server` learned from a fresh session."""

    tools: list[McpToolInfo]
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
