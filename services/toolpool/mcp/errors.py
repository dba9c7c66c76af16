"""Errors of the MCP client side of the toolpool.

Hierarchy::

    AgentFleetError (agentfleet.errors)
    ├── FailedPrecondition
    │   └── MissingSecretError       a ${NAME} of the configuration has no (decryptable) secret
    ├── Unavailable
    │   ├── McpUnavailableError      cannot connect, or the session died under a call
    │   │   └── CircuitOpenError     the server's breaker is open: rejected without trying
    │   └── McpProtocolError         the server answered with a JSON-RPC error
    └── DeadlineExceeded
        └── McpTimeoutError          connect or call took longer than allowed

:class:`~services.toolpool.mcp.pool.McpClientPool.call_tool` turns these into an error
result for the model (tool failures are data); ``list_tools`` and ``test_server`` raise them.
"""

from __future__ import annotations

from agentfleet.errors import DeadlineExceeded, Unavailable
from agentfleet.secrets.values import MissingSecretError

__all__ = [
    "CircuitOpenError",
    "McpProtocolError",
    "McpTimeoutError",
    "McpUnavailableError",
    "MissingSecretError",
]


class McpUnavailableError(Unavailable):
    """The MCP server could not be reached, or its session ended during a call."""


class CircuitOpenError(McpUnavailableError):
    """Rejected without trying: the server failed repeatedly and is cooling down."""


class McpTimeoutError(DeadlineExceeded):
    """Connecting or a call took longer than its limit."""


class McpProtocolError(Unavailable):
    """The server answered with a JSON-RPC error (unknown tool, bad params, ...)."""

    def __init__(self, message: str, *, code: int) -> None:
        super().__init__(message)
        self.rpc_code = code
