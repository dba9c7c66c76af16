"""Unary calls in progress are capped per token and per project (AGENTFLEET_MAX_UNARY_PER_TOKEN,
_PER_PROJECT), so one tenant cannot take every slot of the server-wide RPC cap.

The attack: a member configures an MCP server that never answers ``initialize`` and sends
ListTools after ListTools; each waits out the connect timeout (up to 300 s). Before the caps,
a thousand of them took every slot of AGENTFLEET_GRPC_MAX_CONCURRENT_RPCS and every other
project's calls, and the executor's, were refused RESOURCE_EXHAUSTED.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import asyncpg
import grpc
from google.protobuf import duration_pb2

from agentfleet.mcp.stdio import format_allowlist
from agentfleet.testing.services import Stack, toolpool_only
from agentfleet.testing.stdio_allowlist import TEST_STDIO_COMMANDS
from agentfleet.v1 import toolpool_pb2, toolpool_pb2_grpc

SILENT = (sys.executable, str(Path(__file__).with_name("silent_mcp_server.py")))
P, Q = "hostile", "victim"
ENV = {
    "AGENTFLEET_MCP_STDIO_ALLOWLIST": format_allowlist([*TEST_STDIO_COMMANDS, SILENT]),
    # Small enough that the attack below would take every slot without the caps.
    "AGENTFLEET_GRPC_MAX_CONCURRENT_RPCS": "8",
    "AGENTFLEET_MAX_UNARY_PER_TOKEN": "3",
    "AGENTFLEET_MAX_UNARY_PER_PROJECT": "5",
}


async def _add_silent_server(stack: Stack) -> None:
    admin = await stack.toolpool_as(P)
    await admin.UpsertMcpServer(
        toolpool_pb2.UpsertMcpServerRequest(
            project_id=P,
            mcp_server=toolpool_pb2.McpServer(
                name="silent",
                transport=toolpool_pb2.MCP_TRANSPORT_STDIO,
                command=SILENT[0],
                args=SILENT[1:],
                # Far longer than the test: these calls stay in progress until cancelled.
                connect_timeout=duration_pb2.Duration(seconds=120),
            ),
        )
    )


def _hanging_list_tools(
    member: toolpool_pb2_grpc.ToolPoolServiceStub, n: int
) -> list[asyncio.Future[toolpool_pb2.ListToolsResponse]]:
    request = toolpool_pb2.ListToolsRequest(project_id=P)
    return [asyncio.ensure_future(member.ListTools(request, timeout=120)) for _ in range(n)]


async def _the_one_refused(calls: list[asyncio.Future[object]]) -> grpc.aio.AioRpcError:
    """The first of ``calls`` to end, which must be a refusal while the rest wait on the
    silent server (their connect timeout is far away): one past a cap is refused at once."""
    done, pending = await asyncio.wait(calls, timeout=15, return_when=asyncio.FIRST_COMPLETED)
    assert len(done) == 1, f"expected one refusal at once, {len(done)} calls ended"
    error = done.pop().exception()
    assert isinstance(error, grpc.aio.AioRpcError), error
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, error
    assert all(not call.done() for call in pending)
    return error


async def test_a_projects_tokens_cannot_take_every_rpc_slot(
    database_url: str, db_pool: asyncpg.Pool
) -> None:
    async with toolpool_only(database_url, db_pool, ENV) as stack:
        await _add_silent_server(stack)
        first = await stack.toolpool_as(P, "member")
        second = await stack.toolpool_as(P, "member")
        victim = await stack.toolpool_as(Q, "member")
        executor = toolpool_pb2_grpc.ToolPoolServiceStub(
            stack.channel("toolpool", token=stack.service_tokens["executor"])
        )

        # One token: its fourth call in progress is refused, naming the setting.
        by_first = _hanging_list_tools(first, 4)
        refused = await _the_one_refused(by_first)
        assert "3 calls in progress" in (refused.details() or "")
        assert "AGENTFLEET_MAX_UNARY_PER_TOKEN" in (refused.details() or "")

        # Another token of the same project: the project's cap (5) stops it at two more.
        by_second = _hanging_list_tools(second, 3)
        refused = await _the_one_refused(by_second)
        assert f"project {P!r} already has 5 calls in progress" in (refused.details() or "")
        assert "AGENTFLEET_MAX_UNARY_PER_PROJECT" in (refused.details() or "")

        # Five of the server's eight slots are held; another project and the executor
        # (a service identity, calling for any project) are still served.
        listed = await victim.ListTools(toolpool_pb2.ListToolsRequest(project_id=Q), timeout=10)
        assert listed.tools
        resolved = await executor.ResolveTools(
            toolpool_pb2.ResolveToolsRequest(project_id=Q, patterns=["create_entity"], depth=0),
            timeout=10,
        )
        assert [tool.name for tool in resolved.tools] == ["create_entity"]

        held = [call for call in (*by_first, *by_second) if not call.done()]
        assert len(held) == 5
        for call in held:
            call.cancel()
        await asyncio.gather(*held, return_exceptions=True)
