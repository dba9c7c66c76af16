"""MCP server configuration shared by the toolpool and the executor's product install.

`config` (the rules a server configuration must meet), `servers` (the `kb.mcp_servers`
repository), `stdio` (the operator's allowlist of stdio command lines), `jail` (the launcher
every stdio server starts through). The MCP client itself is the toolpool's
(`services.toolpool.mcp`). May use postgres, secrets and the library's floors.
"""
