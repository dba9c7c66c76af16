"""External MCP servers of a project: configuration, secrets, and pooled client sessions.

- :class:`McpServerStore` / :class:`SecretStore`: ``kb.mcp_servers`` / ``kb.project_secrets``.
- :func:`interpolate` / :func:`resolve_server`: ``${NAME}`` from the project's secrets only.
- :class:`McpClientPool`: lazily connected shared sessions over stdio, SSE and streamable
  HTTP with reconnection, per-call timeouts, a circuit breaker and cached tool lists.
- :func:`map_call_result`: MCP content as the JSON the model reads.
"""

from agentfleet.mcp.config import references
from agentfleet.secrets.values import interpolate

from .breaker import BreakerState, CircuitBreaker
from .content import map_call_result
from .errors import (
    CircuitOpenError,
    McpProtocolError,
    McpTimeoutError,
    McpUnavailableError,
    MissingSecretError,
)
from .interpolate import ResolvedServer, resolve_server
from .models import CallOutcome, McpCallResult, McpServerProbe, McpToolInfo, SecretInfo
from .pool import McpClientPool
from .store import CHANGES_CHANNEL, McpServerStore, SecretStore
from .validation import (
    check_stdio_allowed,
    check_url_destination,
    server_violations,
    validate_server,
)

__all__ = [
    "CHANGES_CHANNEL",
    "BreakerState",
    "CallOutcome",
    "CircuitBreaker",
    "CircuitOpenError",
    "McpCallResult",
    "McpClientPool",
    "McpProtocolError",
    "McpServerProbe",
    "McpServerStore",
    "McpTimeoutError",
    "McpToolInfo",
    "McpUnavailableError",
    "MissingSecretError",
    "ResolvedServer",
    "SecretInfo",
    "SecretStore",
    "check_stdio_allowed",
    "check_url_destination",
    "interpolate",
    "map_call_result",
    "references",
    "resolve_server",
    "server_violations",
    "validate_server",
]
