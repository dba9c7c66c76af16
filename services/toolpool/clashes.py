"""Refusing MCP server configurations whose tool names would clash with other tools or
not be valid function names for the model (DESIGN §8)."""

from __future__ import annotations

import re

from agentfleet.errors import AgentFleetError, InvalidArgument
from agentfleet.mcp.servers import McpServerConfig
from services.toolpool.toolpool import STATIC_TOOL_NAMES, ToolPool

# Gemini's rule for function names.
_FUNCTION_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:-]{0,63}$")
_FUNCTION_NAME_START = re.compile(r"^[A-Za-z_]")


async def check_clashes(config: McpServerConfig, toolpool: ToolPool) -> None:
    """Raises InvalidArgument when ``config``'s tools would share names with other tools.

    Two servers with the same prefix always could; a prefix that built-in names also start
    with (the empty prefix, say) is checked against the server's actual tool list when the
    server can be reached.
    """
    prefix = config.exposed_prefix
    if prefix and not _FUNCTION_NAME_START.match(prefix):
        raise InvalidArgument.for_field(
            "mcp_server.tool_prefix",
            f"tool names starting with {prefix!r} are not valid function names for the model "
            "(they must start with a letter or '_'); set another tool_prefix",
        )
    enabled = await toolpool.servers.list_all(config.project_id)
    others = [s for s in enabled if s.name != config.name]
    for other in others:
        if other.exposed_prefix == config.exposed_prefix:
            raise InvalidArgument.for_field(
                "mcp_server.tool_prefix",
                f"{config.exposed_prefix!r} is already the prefix of MCP server "
                f"{other.name!r}; their tool names would clash",
            )
    if not any(name.startswith(config.exposed_prefix) for name in STATIC_TOOL_NAMES) and all(
        not o.exposed_prefix.startswith(config.exposed_prefix)
        and not config.exposed_prefix.startswith(o.exposed_prefix)
        for o in others
    ):
        return
    try:
        secrets = await toolpool.secrets.resolve(config.project_id)
        probe = await toolpool.mcp.test_server(config, secrets)
    except AgentFleetError:
        # Unreachable now: the catalog keeps the first of two equal names when listing.
        return
    catalog = await toolpool.catalog(config.project_id)
    taken = {t.name for t in catalog.tools if t.mcp_server != config.name}
    exposed = [config.exposed_name(t.name) for t in probe.tools]
    invalid = sorted(name for name in exposed if not _FUNCTION_NAME.match(name))
    if invalid:
        raise InvalidArgument.for_field(
            "mcp_server.tool_prefix",
            f"tools {', '.join(invalid)} would not be valid function names for the model "
            "(letters, digits, '_', '.', ':' or '-', at most 64, starting with a letter or '_')",
        )
    clashing = sorted(name for name in exposed if name in taken)
    if clashing:
        raise InvalidArgument.for_field(
            "mcp_server.tool_prefix",
            f"tools {', '.join(clashing)} would clash with tools already in the catalog; "
            "set another tool_prefix",
        )
