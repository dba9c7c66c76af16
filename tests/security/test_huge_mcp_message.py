"""A hostile MCP server cannot exhaust the shared toolpool with huge messages (docs/SECURITY.md §7).

A *successful* result had no limit: the SDK's stdio reader gathered a line by copying it
again at every 64 KiB chunk, and the toolpool then encoded the whole result once more to cut
it to what the model is shown. 50 MB cost 18 s and +290 MB; 200 MB ran past the 60 s call
timeout; a tools/list of 50,000 tools was never listed. Now one message is refused past
``MAX_MESSAGE_BYTES`` while it is read (the session is closed and the call fails naming the
limit), and a listing keeps at most ``MAX_TOOLS_PER_SERVER`` tools of at most
``MAX_TOOL_SCHEMA_BYTES`` each, reporting what it left out.

The stack is in-process: the test's event loop and memory are the toolpool's. The server,
``huge_mcp_server.py``, is a raw stdio script, so its messages can be any size.
"""

from __future__ import annotations

import resource
import sys
import time
from pathlib import Path

import asyncpg
from google.protobuf import struct_pb2

from agentfleet.mcp.stdio import format_allowlist
from agentfleet.testing.checks.loop_stall import longest_stall_during
from agentfleet.testing.services import Stack, toolpool_only
from agentfleet.testing.stdio_allowlist import TEST_STDIO_COMMANDS
from agentfleet.v1 import toolpool_pb2, toolpool_pb2_grpc
from services.toolpool.mcp.calls import MAX_TOOLS_PER_SERVER
from services.toolpool.mcp.limits import MAX_MESSAGE_BYTES
from services.toolpool.results import MAX_RESULT_BYTES
from tests.integration.test_toolpool_service import call_request, make_run

SERVER = (sys.executable, str(Path(__file__).with_name("huge_mcp_server.py")))
ENVIRON = {"AGENTFLEET_MCP_STDIO_ALLOWLIST": format_allowlist([*TEST_STDIO_COMMANDS, SERVER])}
HOSTILE, VICTIM = "hostile-huge", "victim-huge"
MAX_STALL_S = 1.0
MAX_CALL_S = 10.0  # unfixed: 18 s for 50 MB
MAX_PEAK_GROWTH_MB = 150  # unfixed: +290 MB for 50 MB


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def add_server(stack: Stack, env: dict[str, str]) -> None:
    admin = await stack.toolpool_as(HOSTILE)
    await admin.UpsertMcpServer(
        toolpool_pb2.UpsertMcpServerRequest(
            project_id=HOSTILE,
            mcp_server=toolpool_pb2.McpServer(
                name="huge",
                transport=toolpool_pb2.MCP_TRANSPORT_STDIO,
                command=SERVER[0],
                args=SERVER[1:],
                env=env,
            ),
        )
    )


async def test_a_huge_success_result_is_refused_quickly_and_others_are_served(
    database_url: str, db_pool: asyncpg.Pool
) -> None:
    async with toolpool_only(database_url, db_pool, ENVIRON) as stack:
        await add_server(stack, {})
        executor = toolpool_pb2_grpc.ToolPoolServiceStub(
            stack.channel("toolpool", token=stack.service_tokens["executor"])
        )
        run_id = await make_run(db_pool, HOSTILE, ["huge__big_ok"])
        victim_run = await make_run(db_pool, VICTIM, ["create_entity"])

        def big_ok(megabytes: float) -> toolpool_pb2.CallToolRequest:
            return call_request(HOSTILE, run_id, "huge__big_ok", mb=megabytes)

        # A large result under the limit is shown cut, as before.
        large = await executor.CallTool(big_ok(1), timeout=60)
        assert not large.is_error, large.error_message
        assert large.truncated
        assert large.result.ByteSize() <= MAX_RESULT_BYTES + 1024

        before = peak_rss_mb()
        started = time.monotonic()
        huge, stall = await longest_stall_during(executor.CallTool(big_ok(50), timeout=120))
        took = time.monotonic() - started
        growth = peak_rss_mb() - before

        # Another project is served at once, and the hostile server's next call too.
        victim = toolpool_pb2_grpc.ToolPoolServiceStub(
            stack.channel("toolpool", token=stack.service_tokens["executor"])
        )
        entity = struct_pb2.Struct()
        entity.update({"type": "Doc"})
        served = await victim.CallTool(
            toolpool_pb2.CallToolRequest(
                project_id=VICTIM,
                run_id=victim_run,
                tool_call_id="victim",
                tool_name="create_entity",
                arguments=entity,
            ),
            timeout=10,
        )
        again = await executor.CallTool(big_ok(0.001), timeout=60)

    assert huge.is_error
    assert str(MAX_MESSAGE_BYTES) in huge.error_message, huge.error_message
    assert "limit for one MCP message" in huge.error_message
    assert took < MAX_CALL_S, f"the call took {took:.1f} s"
    assert stall < MAX_STALL_S, f"the toolpool's event loop stood still for {stall:.1f} s"
    assert growth < MAX_PEAK_GROWTH_MB, f"peak memory grew by {growth:.0f} MB"
    assert not served.is_error, served.error_message
    assert not again.is_error, again.error_message


async def test_a_huge_tool_list_is_bounded_and_reported(
    database_url: str, db_pool: asyncpg.Pool
) -> None:
    # 3,000 tools of ~2 KB (6 MB, under the message limit) and two of 200 KB.
    env = {"TOOLS": "3000", "SCHEMA_BYTES": "1000", "HUGE_SCHEMA_TOOLS": "2"}
    async with toolpool_only(database_url, db_pool, ENVIRON) as stack:
        await add_server(stack, env)
        member = await stack.toolpool_as(HOSTILE, "member")
        listing, stall = await longest_stall_during(
            member.ListTools(
                toolpool_pb2.ListToolsRequest(project_id=HOSTILE, mcp_server="huge", page_size=500),
                timeout=120,
            )
        )
        shown = len(listing.tools)
        token = listing.next_page_token
        while token:
            page = await member.ListTools(
                toolpool_pb2.ListToolsRequest(
                    project_id=HOSTILE, mcp_server="huge", page_size=500, page_token=token
                ),
                timeout=60,
            )
            shown += len(page.tools)
            token = page.next_page_token
        admin = await stack.toolpool_as(HOSTILE)
        probe = await admin.TestMcpServer(
            toolpool_pb2.TestMcpServerRequest(project_id=HOSTILE, name="huge"), timeout=120
        )

    assert stall < MAX_STALL_S, f"the toolpool's event loop stood still for {stall:.1f} s"
    assert shown == MAX_TOOLS_PER_SERVER
    [reported] = listing.unavailable_servers
    assert reported.name == "huge"
    assert f"only its first {MAX_TOOLS_PER_SERVER} tools are kept" in reported.error
    assert "2 tools are left out" in reported.error
    assert probe.ok, probe.error
    assert len(probe.tools) == MAX_TOOLS_PER_SERVER
    assert probe.error == reported.error
