"""Issue 37 item 9 on real processes: the toolpool service (``python -m services.toolpool``)
calls a streamable-HTTP MCP server (the ``mcp`` SDK's server in a subprocess on 127.0.0.1)
that answers an unknown session as the reference ``server-everything`` does (HTTP 400
"No valid session ID"). The server restarts mid-test; the next CallTool through the public
gRPC API works, on one new session, with nothing run twice."""

from __future__ import annotations

from pathlib import Path

import asyncpg
import pytest
from google.protobuf import json_format

from agentfleet.rpc.clients import open_channel
from agentfleet.testing.services import start_process_stack
from agentfleet.v1 import toolpool_pb2, toolpool_pb2_grpc
from tests.integration.mcp_test_servers import HttpServer
from tests.integration.test_toolpool_service import call_request, make_run

PROJECT = "restarts"


@pytest.mark.parametrize("unknown_session", ["400", "404"])
async def test_calls_go_on_after_the_mcp_server_restarts(
    database_url: str, db_pool: asyncpg.Pool, tmp_path: Path, unknown_session: str
) -> None:
    server = HttpServer("streamable_http", unknown_session=unknown_session).start()
    stack = await start_process_stack(
        database_url=database_url,
        log_dir=tmp_path,
        names=("toolpool",),
        environ={"AGENTFLEET_AUTH": "off"},
    )
    channel = open_channel(stack.addresses["toolpool"])
    toolpool = toolpool_pb2_grpc.ToolPoolServiceStub(channel)
    try:
        server.wait_accepting()
        await toolpool.UpsertMcpServer(
            toolpool_pb2.UpsertMcpServerRequest(
                project_id=PROJECT,
                mcp_server=toolpool_pb2.McpServer(
                    name="everything",
                    transport=toolpool_pb2.MCP_TRANSPORT_STREAMABLE_HTTP,
                    url=server.url,
                ),
            )
        )
        run_id = await make_run(db_pool, PROJECT, ["everything__*"])

        async def echo(text: str) -> toolpool_pb2.CallToolResponse:
            return await toolpool.CallTool(
                call_request(PROJECT, run_id, "everything__echo", text=text)
            )

        before = await echo("before")
        assert not before.is_error, before.error_message
        server.kill()
        server.start().wait_accepting()  # same port; it knows no session
        for text in ("after", "again"):
            answer = await echo(text)
            assert (answer.is_error, answer.failed) == (False, False), answer.error_message
            assert text in json_format.MessageToJson(answer.result)
        stats = await server.stats()
        assert (stats["initialize"], stats["tool_calls"]) == (1, 2)
        probe = await toolpool.TestMcpServer(
            toolpool_pb2.TestMcpServerRequest(project_id=PROJECT, name="everything")
        )
        assert probe.ok, probe.error
    finally:
        await channel.close()
        await stack.stop(grace_s=5)
        server.kill()
