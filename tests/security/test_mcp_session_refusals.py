"""A streamable-HTTP MCP server that refuses every session (broken, or hostile: it answers
the reference server's 400 "No valid session ID" to each request naming one) costs the pool
at most one new session per call, never runs the call, and opens the server's breaker: the
transparent reconnect of issue 37 item 9 is bounded."""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import AsyncIterator

import pytest_asyncio

from agentfleet.egress import EgressPolicy
from services.toolpool.mcp import CircuitBreaker, McpClientPool
from tests.integration.mcp_test_servers import HttpServer


@pytest_asyncio.fixture
async def pool() -> AsyncIterator[McpClientPool]:
    pool = McpClientPool(
        new_breaker=functools.partial(CircuitBreaker, failure_threshold=2, cool_down_s=60),
        egress=EgressPolicy(allowed_networks=(ipaddress.ip_network("127.0.0.1/32"),)),
    )
    try:
        yield pool
    finally:
        await pool.aclose()


async def test_a_server_refusing_every_session_gets_one_reconnect_per_call(
    pool: McpClientPool,
) -> None:
    server = HttpServer("streamable_http", unknown_session="refuse-all").start()
    try:
        server.wait_accepting()
        config = server.config("refusing")
        for _ in range(2):
            result = await pool.call_tool(config, {}, "echo", {"text": "x"})
            assert (result.is_error, result.outcome) == (True, "unavailable")
            assert "it did not run" in result.error
        stats = await server.stats()
        # Two calls, each on its session and then on one new one; neither ran.
        assert (stats["initialize"], stats["tool_calls"]) == (4, 0)
        assert pool.breaker_state("proj-mcp", "refusing") == "open"
        rejected = await pool.call_tool(config, {}, "echo", {"text": "x"})
        assert rejected.outcome == "circuit_open"
        assert (await server.stats())["initialize"] == 4
    finally:
        server.kill()
