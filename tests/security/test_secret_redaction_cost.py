"""A tenant admin cannot stall the shared toolpool with its own secrets (docs/SECURITY.md §7).

Every MCP connection, CallTool and TestMcpServer builds a redactor from the project's
secret values on the toolpool's event loop. It used to compile one regex with ~8
alternatives per character of every value: 4 values of 16 KiB (the most SetSecret takes)
stood the loop still for 4-4.6 s per TestMcpServer, and a changed value paid again.

The stack is in-process: the test's event loop is the toolpool's, so the longest gap of a
50 ms ticker during one TestMcpServer call is how long every other project stood still.
The server tested is a loopback URL on a closed port (no traffic leaves the host).
"""

from __future__ import annotations

import asyncio
import secrets
import time

from agentfleet.testing.services import Stack
from agentfleet.v1 import toolpool_pb2, toolpool_pb2_grpc

P = "tenant-a"
TICK_S = 0.05


async def test_big_secrets_do_not_stall_the_toolpool_loop(stack: Stack) -> None:
    token = await stack.create_token(P, "admin")
    toolpool = toolpool_pb2_grpc.ToolPoolServiceStub(stack.channel("toolpool", token=token))
    for i in range(4):
        await toolpool.SetSecret(
            toolpool_pb2.SetSecretRequest(
                project_id=P, name=f"BIG_{i}", value=secrets.token_urlsafe(12288)[:16384]
            )
        )

    longest_gap = 0.0
    done = asyncio.Event()

    async def ticker() -> None:
        nonlocal longest_gap
        last = time.monotonic()
        while not done.is_set():
            await asyncio.sleep(TICK_S)
            now = time.monotonic()
            longest_gap = max(longest_gap, now - last - TICK_S)
            last = now

    ticking = asyncio.create_task(ticker())
    try:
        answer = await toolpool.TestMcpServer(
            toolpool_pb2.TestMcpServerRequest(
                project_id=P,
                mcp_server=toolpool_pb2.McpServer(
                    name="probe",
                    transport=toolpool_pb2.MCP_TRANSPORT_STREAMABLE_HTTP,
                    url="http://127.0.0.1:9/mcp",  # discard port: nothing listens
                ),
            ),
            timeout=120,
        )
    finally:
        done.set()
        await ticking
    assert not answer.ok
    assert longest_gap < 1.0, f"the toolpool's event loop stood still for {longest_gap:.1f} s"
