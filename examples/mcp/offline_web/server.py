"""An offline web for the research demo: ``web_search`` and ``web_fetch`` over a bundled
corpus (``corpus.json``), served over stdio with the ``mcp`` SDK. No network is used.

Swap it for the real thing by pointing the product's ``web`` MCP server at the published
``mcp-server-fetch`` and a search MCP server of your choice (see the README).

Run: ``python examples/mcp/offline_web/server.py`` (stdio).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

CORPUS: list[dict[str, str]] = json.loads((Path(__file__).parent / "corpus.json").read_text())
_WORD = re.compile(r"[a-z0-9]+")

server = MCPServer("agentfleet-offline-web", log_level="WARNING")


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if len(w) > 2}


def search(query: str, limit: int) -> list[dict[str, Any]]:
    """Pages ranked by how many query words their title (twice) and text contain."""
    wanted = _words(query)
    scored = []
    for page in CORPUS:
        score = 2 * len(wanted & _words(page["title"])) + len(wanted & _words(page["text"]))
        if score:
            scored.append((score, page))
    scored.sort(key=lambda item: (-item[0], item[1]["url"]))
    return [
        {"url": p["url"], "title": p["title"], "kind": p["kind"], "snippet": p["text"][:160]}
        for _, p in scored[:limit]
    ]


@server.tool()
def web_search(query: str, limit: int = 5) -> list[dict[str, Any]]:
    """Searches the (offline) web; returns up to ``limit`` results with url, title, snippet."""
    return search(query, max(1, min(limit, 10)))


@server.tool()
def web_fetch(url: str) -> dict[str, str]:
    """Fetches a page by URL; returns its title, kind and text."""
    for page in CORPUS:
        if page["url"] == url:
            return page
    raise ToolError(f"no page at {url} (this offline web has {len(CORPUS)} pages)")


if __name__ == "__main__":
    server.run("stdio")
