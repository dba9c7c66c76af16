"""ListMcpServers reports each server's health (issue 34, item 5): the toolpool replica's
breaker state, its last success and failure with the last error's text, and whether a
session is open, from real calls to a real stdio MCP server."""

from __future__ import annotations

import datetime

import asyncpg

from agentfleet.testing.services import toolpool_only
from agentfleet.v1 import toolpool_pb2
from tests.integration.test_toolpool_service import (
    _executor,
    _stdio_server,
    call_request,
    make_run,
)

PROJECT = "health"


async def _health(stub, name: str = "test") -> toolpool_pb2.McpServerHealth:  # type: ignore[no-untyped-def]
    listed = await stub.ListMcpServers(toolpool_pb2.ListMcpServersRequest(project_id=PROJECT))
    (server,) = [s for s in listed.mcp_servers if s.name == name]
    return server.health


async def test_health_follows_successes_errors_and_the_breaker(
    database_url: str, db_pool: asyncpg.Pool
) -> None:
    async with toolpool_only(database_url, db_pool) as stack:
        admin = await stack.toolpool_as(PROJECT)
        member = await stack.toolpool_as(PROJECT, role="member")
        await admin.UpsertMcpServer(
            toolpool_pb2.UpsertMcpServerRequest(
                project_id=PROJECT, mcp_server=_stdio_server("test")
            )
        )
        fresh = await _health(member)
        assert fresh.breaker == toolpool_pb2.MCP_BREAKER_STATE_CLOSED
        assert not fresh.HasField("last_success_time")
        assert not fresh.HasField("last_failure_time")
        assert (fresh.last_error, fresh.connected) == ("", False)

        run_id = await make_run(stack.pool, PROJECT, ["test__*"])
        executor = _executor(stack)
        before = datetime.datetime.now(datetime.UTC)
        echoed = await executor.CallTool(call_request(PROJECT, run_id, "test__echo", text="hi"))
        assert not echoed.is_error, echoed.error_message
        well = await _health(member)
        assert well.breaker == toolpool_pb2.MCP_BREAKER_STATE_CLOSED
        assert well.connected
        assert well.last_success_time.ToDatetime(datetime.UTC) >= before - datetime.timedelta(
            seconds=1
        )

        # A protocol error is shown, but an answering server's breaker does not count it.
        refused = await executor.CallTool(call_request(PROJECT, run_id, "test__refuse"))
        assert refused.is_error
        noted = await _health(member)
        assert "always answers a protocol error" in noted.last_error
        assert noted.HasField("last_failure_time")
        assert (noted.breaker, noted.consecutive_failures) == (
            toolpool_pb2.MCP_BREAKER_STATE_CLOSED,
            0,
        )

        # Five timeouts in a row open the breaker (its default threshold).
        for _ in range(5):
            slow = call_request(PROJECT, run_id, "test__slow", seconds=30)
            slow.timeout.FromTimedelta(datetime.timedelta(seconds=0.3))
            assert (await executor.CallTool(slow)).failed
        tripped = await _health(member)
        assert tripped.breaker == toolpool_pb2.MCP_BREAKER_STATE_OPEN
        assert tripped.consecutive_failures == 5
        assert tripped.retry_after.ToTimedelta() > datetime.timedelta(0)
        assert "always answers" not in tripped.last_error  # the last failure's text
        assert tripped.last_error
        assert tripped.last_failure_time.ToDatetime() > noted.last_failure_time.ToDatetime()
        # The admin sees the same health.
        seen = await _health(admin)
        assert (seen.breaker, seen.last_error) == (tripped.breaker, tripped.last_error)
