"""A small MCP server for the toolpool's tests, written with the ``mcp`` SDK (``MCPServer``).

Tools: ``echo(text)``, ``add(a, b)``, ``slow(seconds)``, ``env(name)`` (an environment
variable of this process, to prove secrets reach a stdio server's env), ``header(name)``
(a header of the HTTP request that carried the call, to prove headers and ``traceparent``
are sent), ``fail()`` (an ``isError`` result) and ``pid()``.

HTTP transports also answer ``GET /stats`` with ``{"initialize": n, "list_tools": n,
"tool_calls": n}``, so a test can see how many sessions were opened and requests served
without opening a session itself.

Run: ``python examples/mcp/test_server/server.py --transport stdio|sse|streamable-http
--port N``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

_stats = {"initialize": 0, "list_tools": 0, "tool_calls": 0}

server = MCPServer("agentfleet-test-server", log_level="WARNING")


async def _count(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    if ctx.method == "initialize":
        _stats["initialize"] += 1
    elif ctx.method == "tools/list":
        _stats["list_tools"] += 1
    elif ctx.method == "tools/call":
        _stats["tool_calls"] += 1
    return await call_next(ctx)


server.middleware.append(_count)


@server.tool()
def echo(text: str) -> str:
    """Returns ``text`` unchanged."""
    return text


@server.tool()
def add(a: float, b: float) -> float:
    """Returns ``a + b``."""
    return a + b


@server.tool()
async def slow(seconds: float) -> str:
    """Sleeps ``seconds`` then answers ``done``."""
    await asyncio.sleep(seconds)
    return "done"


@server.tool()
def env(name: str) -> str:
    """The value of environment variable ``name`` in this server process ('' when unset)."""
    return os.environ.get(name, "")


@server.tool()
def header(name: str, ctx: Context) -> str:
    """The value of HTTP request header ``name`` ('' when absent or not over HTTP)."""
    headers = ctx.headers or {}
    return headers.get(name.lower(), "")


@server.tool()
def fail() -> str:
    """Always fails: the result carries ``isError``."""
    raise ToolError("this tool always fails")


@server.tool()
def pid() -> int:
    """The process id of this server."""
    return os.getpid()


@server.custom_route("/stats", methods=["GET"])
async def stats(_request: Request) -> Response:
    return JSONResponse(_stats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transport", choices=["stdio", "sse", "streamable-http"], default="stdio")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    if args.transport == "stdio":
        server.run("stdio")
    else:
        server.run(args.transport, host=args.host, port=args.port)


if __name__ == "__main__":
    main()
