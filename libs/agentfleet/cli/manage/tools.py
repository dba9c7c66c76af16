"""``agentfleet mcp add|list|test|remove`` and ``agentfleet secret set|list|remove``."""

from __future__ import annotations

import argparse
import getpass
import sys
from collections.abc import Awaitable

from rich.text import Text

from agentfleet.cli.client import CliError, Connection
from agentfleet.cli.render import console, enum_name, print_json, print_listing, seconds
from agentfleet.timestamps import duration_proto
from agentfleet.v1 import toolpool_pb2

TRANSPORTS = {
    "stdio": toolpool_pb2.MCP_TRANSPORT_STDIO,
    "sse": toolpool_pb2.MCP_TRANSPORT_SSE,
    "streamable_http": toolpool_pb2.MCP_TRANSPORT_STREAMABLE_HTTP,
}


def key_values(values: list[str], flag: str) -> dict[str, str]:
    """Repeated ``KEY=VALUE`` flags as a mapping; a CliError naming ``flag`` for a bad one."""
    result = {}
    for pair in values:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise CliError("INVALID_ARGUMENT", f"{flag}: expected KEY=VALUE, got {pair!r}")
        result[key] = value
    return result


def mcp_server_from(args: argparse.Namespace) -> toolpool_pb2.McpServer:
    transport = args.transport or ("stdio" if args.command else "streamable_http")
    server = toolpool_pb2.McpServer(
        name=args.name,
        transport=TRANSPORTS[transport],
        command=args.command or "",
        args=args.arg,
        env=key_values(args.env, "--env"),
        url=args.url or "",
        headers=key_values(args.header, "--header"),
    )
    if args.prefix is not None:
        server.tool_prefix = args.prefix
    if args.call_timeout is not None:
        server.call_timeout.CopyFrom(duration_proto(args.call_timeout))
    return server


async def mcp(conn: Connection, args: argparse.Namespace) -> int:
    toolpool = conn.toolpool()
    if args.mcp_command == "add":
        reply = await toolpool.UpsertMcpServer(
            toolpool_pb2.UpsertMcpServerRequest(
                project_id=conn.project, mcp_server=mcp_server_from(args)
            )
        )
        verb = "added" if reply.created else "updated"
        console.print(f"{verb} mcp server {reply.mcp_server.name}")
        return 0
    if args.mcp_command == "remove":
        request = toolpool_pb2.DeleteMcpServerRequest(project_id=conn.project, name=args.name)
        return await _removed(toolpool.DeleteMcpServer(request), f"mcp server {args.name}")
    if args.mcp_command == "test":
        reply = await toolpool.TestMcpServer(
            toolpool_pb2.TestMcpServerRequest(project_id=conn.project, name=args.name)
        )
        if args.json:
            print_json(reply)
        elif reply.ok:
            console.print(
                Text.assemble(
                    ("ok", "green"),
                    f" {args.name}: {reply.server_name} {reply.server_version}, "
                    f"{len(reply.tools)} tools in {seconds(reply.duration)}",
                )
            )
            for tool in reply.tools:
                console.print(Text.assemble(f"  {tool.name}  ", (tool.description[:70], "dim")))
        else:
            console.print(Text.assemble(("failed", "red"), f" {args.name}: {reply.error}"))
        return 0 if reply.ok else 1
    reply = await toolpool.ListMcpServers(
        toolpool_pb2.ListMcpServersRequest(project_id=conn.project, page_size=100)
    )
    # No "more" line: the first 100 servers are all the listing shows (no --page-token).
    return print_listing(
        reply,
        reply.mcp_servers,
        ("server", "transport", "target", "prefix", "enabled", "product"),
        _server_row,
        json_mode=args.json,
    )


def _server_row(server: toolpool_pb2.McpServer) -> tuple[str, ...]:
    return (
        server.name,
        enum_name(toolpool_pb2.McpTransport, server.transport, "MCP_TRANSPORT_"),
        server.url or " ".join([server.command, *server.args]),
        server.tool_prefix if server.HasField("tool_prefix") else f"{server.name}__",
        "no" if server.HasField("enabled") and not server.enabled else "yes",
        server.product_name or "-",
    )


async def _removed(delete: Awaitable[object], what: str) -> int:
    """Awaits a delete call and says what it removed."""
    await delete
    console.print(f"removed {what}")
    return 0


def _secret_value(args: argparse.Namespace) -> str:
    if args.value is not None:
        return str(args.value)
    # Never echoed: prompt without echo on a terminal, else read the whole of stdin.
    if sys.stdin.isatty():
        return getpass.getpass(f"value of {args.name}: ")
    return sys.stdin.read().rstrip("\n")


async def secret(conn: Connection, args: argparse.Namespace) -> int:
    toolpool = conn.toolpool()
    if args.secret_command == "set":
        value = _secret_value(args)
        if not value:
            raise CliError("INVALID_ARGUMENT", "value: empty (pass --value or pipe it on stdin)")
        reply = await toolpool.SetSecret(
            toolpool_pb2.SetSecretRequest(project_id=conn.project, name=args.name, value=value)
        )
        console.print(f"{'created' if reply.created else 'updated'} secret {args.name}")
        return 0
    if args.secret_command == "remove":
        request = toolpool_pb2.DeleteSecretRequest(project_id=conn.project, name=args.name)
        return await _removed(toolpool.DeleteSecret(request), f"secret {args.name}")
    reply = await toolpool.ListSecrets(
        toolpool_pb2.ListSecretsRequest(project_id=conn.project, page_size=100)
    )
    if args.json:
        print_json(reply)
        return 0
    for item in reply.secrets:
        console.print(item.name)
    return 0
