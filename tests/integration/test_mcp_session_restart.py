"""A streamable-HTTP MCP server that restarts forgets its sessions: the pool drops the
session the server no longer knows and opens a new one, once, transparently (issue 37
item 9). Real servers (the ``mcp`` SDK's server in a subprocess), restarted mid-test, each
answering an unknown session id the way real servers do: the SDK's 404, and the reference
server's 400 "No valid session ID" as JSON-RPC and as text."""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from agentfleet.egress import EgressPolicy
from agentfleet.testing.waiting import wait_for
from services.toolpool.mcp import CircuitBreaker, McpCallResult, McpClientPool

from .mcp_test_servers import HttpServer


@pytest_asyncio.fixture
async def pool() -> AsyncIterator[McpClientPool]:
    pool = McpClientPool(
        new_breaker=functools.partial(CircuitBreaker, failure_threshold=2, cool_down_s=0.3),
        egress=EgressPolicy(allowed_networks=(ipaddress.ip_network("127.0.0.1/32"),)),
    )
    try:
        yield pool
    finally:
        await pool.aclose()


def echoed(result: McpCallResult) -> object:
    assert not result.is_error, result.error
    return result.result["structured_content"]["result"]


@pytest.mark.parametrize("unknown_session", ["404", "400", "400-text"])
async def test_a_restarted_server_gets_a_new_session_once(
    pool: McpClientPool, unknown_session: str
) -> None:
    server = HttpServer("streamable_http", unknown_session=unknown_session).start()
    try:
        server.wait_accepting()
        config = server.config("restarting")
        assert echoed(await pool.call_tool(config, {}, "echo", {"text": "before"})) == "before"
        server.kill()
        server.start().wait_accepting()  # same port, no sessions
        for text in ("after", "again"):
            # The first call is refused for its session, reconnects and runs once; the
            # second uses the new session.
            assert echoed(await pool.call_tool(config, {}, "echo", {"text": text})) == text
        stats = await server.stats()
        assert (stats["initialize"], stats["tool_calls"]) == (1, 2)
        assert pool.breaker_state("proj-mcp", "restarting") == "closed"
    finally:
        server.kill()


async def test_protocol_errors_do_not_close_an_open_breaker(pool: McpClientPool) -> None:
    server = HttpServer("streamable_http").start()
    try:
        server.wait_accepting()
        config = server.config("erring")
        for _ in range(2):
            slow = await pool.call_tool(config, {}, "slow", {"seconds": 30}, timeout_s=0.1)
            assert slow.outcome == "timeout"
        assert pool.breaker_state("proj-mcp", "erring") == "open"
        # The half-open probe meets a JSON-RPC error: the server answers, but nothing says
        # it works, so the breaker is not closed by it.
        await wait_for(lambda: pool.breaker_state("proj-mcp", "erring") == "half_open", "cool")
        refused = await pool.call_tool(config, {}, "refuse", {})
        assert (refused.is_error, refused.outcome) == (True, "protocol_error")
        assert pool.breaker_state("proj-mcp", "erring") == "half_open"
        assert echoed(await pool.call_tool(config, {}, "echo", {"text": "ok"})) == "ok"
        assert pool.breaker_state("proj-mcp", "erring") == "closed"
    finally:
        server.kill()
