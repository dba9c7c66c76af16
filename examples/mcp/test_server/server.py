"""A small MCP server for the toolpool's tests, written with the ``mcp`` SDK (``MCPServer``).

Tools: ``echo(text)``, ``add(a, b)``, ``slow(seconds)``, ``env(name)`` (an environment
variable of this process, to prove secrets reach a stdio server's env), ``header(name)``
(a header of the HTTP request that carried the call, to prove headers and ``traceparent``
are sent), ``fail()`` (an ``isError`` result), ``refuse()`` (a JSON-RPC error) and ``pid()``.

HTTP transports also answer ``GET /stats`` with ``{"initialize": n, "list_tools": n,
"tool_calls": n}``, so a test can see how many sessions were opened and requests served
without opening a session itself.

Run: ``python examples/mcp/test_server/server.py --transport stdio|sse|streamable-http
--port N``. ``--unknown-session 400`` answers a request for a session this process does not
know as the widely copied reference server (``server-everything``) does: HTTP 400 with
``{"error": {"code": -32000, "message": "Bad Request: No valid session ID provided"}}``;
``400-text`` the same in plain text; the default is the SDK's 404 "Session not found".
``refuse-all`` answers that 400 to every request naming a session, known or not (a broken
or hostile server: the client must not reconnect forever).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from typing import Any

import uvicorn
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
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
def refuse() -> str:
    """Always answers with a JSON-RPC error (-32603), as a server failing inside does."""
    raise MCPError(code=-32603, message="this tool always answers a protocol error")


@server.tool()
def pid() -> int:
    """The process id of this server."""
    return os.getpid()


@server.custom_route("/stats", methods=["GET"])
async def stats(_request: Request) -> Response:
    return JSONResponse(_stats)


_NO_SESSION = "Bad Request: No valid session ID provided"


def _unknown_session_as_400(app: Any, *, as_json: bool, always: bool = False) -> Any:
    """``app`` with its 404 for an unknown session id turned into the reference server's 400
    (``always``: every request naming a session is refused so, without reaching ``app``)."""

    async def wrapped(scope: dict[str, Any], receive: Any, send: Any) -> None:
        headers = dict(scope.get("headers") or ())
        if scope["type"] != "http" or b"mcp-session-id" not in headers:
            await app(scope, receive, send)
            return
        replaced = False

        async def rewrite(message: dict[str, Any]) -> None:
            nonlocal replaced
            if message["type"] == "http.response.start" and message["status"] in (
                (404, 200, 202) if always else (404,)
            ):
                replaced = True
                if as_json:
                    error = {"code": -32000, "message": _NO_SESSION}
                    body = json.dumps({"jsonrpc": "2.0", "error": error, "id": None}).encode()
                    kind = b"application/json; charset=utf-8"
                else:
                    body, kind = _NO_SESSION.encode(), b"text/plain; charset=utf-8"
                await send(
                    {
                        "type": "http.response.start",
                        "status": 400,
                        "headers": [
                            (b"content-type", kind),
                            (b"content-length", str(len(body)).encode()),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
            elif not replaced:
                await send(message)

        if always:
            # Answer before the app runs anything: the request must not be processed.
            await rewrite({"type": "http.response.start", "status": 404})
            return
        await app(scope, receive, rewrite)

    return wrapped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transport", choices=["stdio", "sse", "streamable-http"], default="stdio")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument(
        "--unknown-session", choices=["404", "400", "400-text", "refuse-all"], default="404"
    )
    args = parser.parse_args()
    if args.transport == "stdio":
        server.run("stdio")
    elif args.transport == "streamable-http" and args.unknown_session != "404":
        app = server.streamable_http_app(host=args.host)
        app = _unknown_session_as_400(
            app,
            as_json=args.unknown_session != "400-text",
            always=args.unknown_session == "refuse-all",
        )
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    else:
        server.run(args.transport, host=args.host, port=args.port)


if __name__ == "__main__":
    main()
