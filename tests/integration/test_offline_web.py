"""The demo's offline web MCP server, spoken to over stdio by the toolpool's MCP pool."""

import sys
from pathlib import Path

from agentfleet.mcp.servers import McpServerConfig
from services.toolpool.mcp import McpClientPool

SERVER = Path(__file__).parents[2] / "examples" / "mcp" / "offline_web" / "server.py"


async def test_search_and_fetch_over_stdio() -> None:
    config = McpServerConfig(
        project_id="demo",
        name="web",
        transport="stdio",
        command=sys.executable,
        args=(str(SERVER),),
    )
    pool = McpClientPool(stdio_allowlist=((sys.executable, str(SERVER)),))
    try:
        tools = {t.name for t in (await pool.list_tools(config, {})).tools}
        assert tools == {"web_search", "web_fetch"}
        found = await pool.call_tool(
            config, {}, "web_search", {"query": "WebAssembly vs Docker startup benchmark"}
        )
        assert not found.is_error, found.error
        text = str(found.result)
        assert "https://offline.example/bench/wasm-vs-docker-startup" in text
        page = await pool.call_tool(
            config, {}, "web_fetch", {"url": "https://offline.example/bench/wasm-vs-docker-startup"}
        )
        assert not page.is_error
        assert "10,000 concurrent Wasm instances" in str(page.result)
        missing = await pool.call_tool(config, {}, "web_fetch", {"url": "https://nowhere.example"})
        assert missing.is_error
        assert "no page at https://nowhere.example" in (missing.error or "")
    finally:
        await pool.aclose()
