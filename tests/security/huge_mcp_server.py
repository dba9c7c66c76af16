"""A hostile stdio MCP server written by hand (newline-delimited JSON-RPC), so that its
messages can be any size: the SDK's server would build each one whole too, and slower.

Environment: ``TOOLS`` (extra tools ``t0`` ... listed, each with a ``SCHEMA_BYTES``-byte
description and as large a schema) and ``HUGE_SCHEMA_TOOLS`` (tools ``huge0`` ..., listed
first, whose description and schema take 200 KiB). Tool ``big_ok(mb)`` answers a
*successful* result of ``mb`` megabytes of text.

Run: ``python tests/security/huge_mcp_server.py`` (stdio).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

TOOLS = int(os.environ.get("TOOLS", "0"))
SCHEMA_BYTES = int(os.environ.get("SCHEMA_BYTES", "100"))
HUGE_SCHEMA_TOOLS = int(os.environ.get("HUGE_SCHEMA_TOOLS", "0"))


def send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def tool(name: str, pad: str) -> dict[str, Any]:
    schema = {"type": "object", "properties": {"a": {"type": "string", "description": pad}}}
    return {"name": name, "description": pad, "inputSchema": schema}


def tools() -> list[dict[str, Any]]:
    big_ok = {"type": "object", "properties": {"mb": {"type": "number"}}}
    listed = [{"name": "big_ok", "description": "a large success", "inputSchema": big_ok}]
    listed += [tool(f"huge{i}", "h" * 100 * 1024) for i in range(HUGE_SCHEMA_TOOLS)]
    listed += [tool(f"t{i}", "d" * SCHEMA_BYTES) for i in range(TOOLS)]
    return listed


def answer(method: str, params: dict[str, Any]) -> dict[str, Any]:
    if method == "initialize":
        return {
            "protocolVersion": params["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "huge", "version": "1"},
        }
    if method == "tools/list":
        return {"tools": tools()}
    if method == "tools/call":
        megabytes = float(params.get("arguments", {}).get("mb", 1))
        text = "A" * int(megabytes * 1024 * 1024)
        return {"content": [{"type": "text", "text": text}], "isError": False}
    return {}


for line in sys.stdin:
    request = json.loads(line)
    if request.get("id") is not None:
        result = answer(request["method"], request.get("params") or {})
        send({"jsonrpc": "2.0", "id": request["id"], "result": result})
