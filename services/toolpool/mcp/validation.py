"""Checks of an MCP server configuration before the toolpool stores it; pure, no I/O.

The rules themselves are :mod:`agentfleet.mcp.config`, shared with the executor's product
installation (the other writer of ``kb.mcp_servers``); here they are applied to a
:class:`McpServerConfig` under the request's field names (``mcp_server.url``, ...). Whether a
stdio server may run at all is the operator's allowlist (:func:`check_stdio_allowed`,
PERMISSION_DENIED), checked after.
"""

from __future__ import annotations

from agentfleet.egress import EgressPolicy
from agentfleet.errors import FieldViolation, InvalidArgument
from agentfleet.mcp import config as mcp_config
from agentfleet.mcp.servers import McpServerConfig
from agentfleet.mcp.stdio import StdioAllowlist, loader_env_violations, require_allowed_stdio


def validate_server(config: McpServerConfig) -> None:
    """Raises :class:`InvalidArgument` listing every violation of ``config``."""
    violations = server_violations(config)
    if violations:
        raise InvalidArgument.for_fields(violations)


def check_stdio_allowed(config: McpServerConfig, allowlist: StdioAllowlist) -> None:
    """Whether ``config`` may be started now: :class:`PermissionDenied` when it is a stdio
    server whose command line is not on the operator's allowlist (see
    :mod:`agentfleet.mcp.stdio`), :class:`InvalidArgument` when its ``env`` sets a loader or
    interpreter variable. Run on save, on test, and each time the toolpool starts one (the
    allowlist may have shrunk, or the row predate the checks, since it was saved).
    """
    if config.transport != "stdio":
        return
    require_allowed_stdio(config.command, config.args, allowlist)
    violations = loader_env_violations(config.env, "mcp_server.env")
    if violations:
        raise InvalidArgument.for_fields(violations)


def check_url_destination(config: McpServerConfig, egress: EgressPolicy) -> None:
    """:class:`InvalidArgument` naming ``mcp_server.url`` when an HTTP server's URL host is
    a literal address, ``localhost`` or a metadata name the egress policy refuses (names
    are judged at every connect, :mod:`~agentfleet.egress`)."""
    violations = mcp_config.url_destination_violations(config, egress.literal_refusal)
    if violations:
        raise InvalidArgument.for_fields(violations)


def server_violations(config: McpServerConfig) -> list[FieldViolation]:
    """Every violation of ``config``, each naming its field; empty when it is valid."""
    out: list[FieldViolation] = []
    if not config.project_id:
        out.append(FieldViolation("project_id", "is required"))
    out.extend(mcp_config.server_violations(config))
    return out
