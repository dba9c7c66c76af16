"""McpServer.health across tenants (issue 34, item 5): the health ListMcpServers reports is
the caller's project's own (servers are keyed by project and name, so two projects' servers
of one name share no breaker and no error), another project's token reads none of it, and
the last error shown holds no project secret and is bounded, though the hostile server
(``tattling_mcp_server.py``) quotes its secret in a long error."""

from __future__ import annotations

import sys
from pathlib import Path

import asyncpg
import grpc
import pytest

from agentfleet.mcp.stdio import format_allowlist
from agentfleet.testing.services import toolpool_only
from agentfleet.testing.stdio_allowlist import TEST_STDIO_COMMANDS
from agentfleet.v1 import toolpool_pb2
from tests.integration.test_toolpool_service import _executor, call_request, make_run

SERVER = (sys.executable, str(Path(__file__).with_name("tattling_mcp_server.py")))
SECRET = "hl-Zq81-Wälder-secret"
ALPHA, BETA = "health-alpha", "health-beta"


def _tattler() -> toolpool_pb2.McpServer:
    return toolpool_pb2.McpServer(
        name="shared",
        transport=toolpool_pb2.MCP_TRANSPORT_STDIO,
        command=SERVER[0],
        args=[SERVER[1]],
        env={"API_TOKEN": "${TOKEN}"},
    )


async def _health(stub, project: str) -> toolpool_pb2.McpServerHealth:  # type: ignore[no-untyped-def]
    listed = await stub.ListMcpServers(toolpool_pb2.ListMcpServersRequest(project_id=project))
    (server,) = listed.mcp_servers
    return server.health


async def test_health_is_the_callers_projects_own_and_leaks_no_secret(
    database_url: str, db_pool: asyncpg.Pool
) -> None:
    environ = {"AGENTFLEET_MCP_STDIO_ALLOWLIST": format_allowlist([*TEST_STDIO_COMMANDS, SERVER])}
    async with toolpool_only(database_url, db_pool, environ) as stack:
        alpha = await stack.toolpool_as(ALPHA)
        beta = await stack.toolpool_as(BETA)
        for stub, project in ((alpha, ALPHA), (beta, BETA)):
            await stub.SetSecret(
                toolpool_pb2.SetSecretRequest(project_id=project, name="TOKEN", value=SECRET)
            )
            await stub.UpsertMcpServer(
                toolpool_pb2.UpsertMcpServerRequest(project_id=project, mcp_server=_tattler())
            )
        # Alpha's server is called and answers its secret-quoting error.
        run_id = await make_run(stack.pool, ALPHA, ["shared__*"])
        called = await _executor(stack).CallTool(call_request(ALPHA, run_id, "shared__tattle"))
        assert called.is_error
        member = await stack.toolpool_as(ALPHA, role="member")
        failed = await _health(member, ALPHA)
        assert failed.HasField("last_failure_time")
        assert "rejected" in failed.last_error
        assert SECRET not in failed.last_error
        assert len(failed.last_error) <= 600  # 500 and the note saying it was cut

        # Beta's server of the same name has not been touched.
        untouched = await _health(beta, BETA)
        assert untouched.breaker == toolpool_pb2.MCP_BREAKER_STATE_CLOSED
        assert untouched.last_error == ""
        assert not untouched.HasField("last_failure_time")
        assert not untouched.connected

        # Beta's token reads nothing of alpha's, health included.
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await beta.ListMcpServers(toolpool_pb2.ListMcpServersRequest(project_id=ALPHA))
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "rejected" not in (refused.value.details() or "")
