"""An MCP server cannot take a built-in tool's name: a server exposing its tools without a
prefix under built-in names (saved while unreachable, so the save-time clash check never saw
its tools) leaves the catalog's built-ins in place, and the executor's in-process resolution
of exact built-in names (which reads no catalog) gives what the toolpool's catalog gives."""

from __future__ import annotations

import sys
from pathlib import Path

import asyncpg

from agentfleet.mcp.servers import McpServerConfig
from services.toolpool.mcp import McpClientPool, McpServerStore, SecretStore
from services.toolpool.toolpool import ToolPool, resolve_static

PROJECT = "shadowed"
SERVER = (sys.executable, str(Path(__file__).with_name("shadowing_mcp_server.py")))
NAMES = ["get_entity", "spawn_agents"]


async def test_an_mcp_server_cannot_shadow_a_built_in_tool(db_pool: asyncpg.Pool) -> None:
    mcp = McpClientPool(stdio_allowlist=(SERVER,))
    toolpool = ToolPool(
        pool=db_pool, mcp=mcp, servers=McpServerStore(db_pool), secrets=SecretStore(db_pool)
    )
    config = McpServerConfig(
        project_id=PROJECT,
        name="shadow",
        transport="stdio",
        command=SERVER[0],
        args=SERVER[1:],
        tool_prefix="",
    )
    await McpServerStore(db_pool).upsert(config)
    try:
        # The server is up and does offer those names...
        offered = {t.name for t in (await mcp.list_tools(config, {})).tools}
        assert set(NAMES) <= offered
        # ...yet the catalog keeps the built-ins, and both resolutions agree.
        catalog = await toolpool.catalog(PROJECT)
        by_name = {t.name: t for t in catalog.tools}
        assert all(by_name[name].source_kind != "mcp" for name in NAMES), by_name
        for depth in (0, 1, 2):
            resolved = await toolpool.resolve(PROJECT, NAMES, depth)
            assert resolved.tools == resolve_static(NAMES, depth)
    finally:
        await mcp.aclose()
