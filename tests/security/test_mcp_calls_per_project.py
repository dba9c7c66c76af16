"""A project's MCP tool calls in progress in the toolpool are capped
(AGENTFLEET_MAX_MCP_CALLS_PER_PROJECT), so a project whose MCP server hangs cannot crowd
every other project's tool calls (docs/SECURITY.md §2).

The attack: CallTool comes from the executor, a service identity the gRPC caps do not count,
on behalf of the project's runs. A tenant's MCP server that answers no tools/call (here the
test server's ``slow`` tool, told to sleep far past the test) kept each call in flight until
its call timeout, with no bound on how many: tasks, requests on its session and memory in
the shared toolpool, and the server-wide RPC cap within reach. Now one past the project's
cap is refused at once, RESOURCE_EXHAUSTED naming the setting, which the executor's gateway
hands to the model as the call's error (the run goes on); another project's calls are
served meanwhile, and a finished call frees its slot.
"""

from __future__ import annotations

import asyncio
import sys
import time

import asyncpg
import grpc
from google.protobuf import duration_pb2, json_format

from agentfleet.mcp.stdio import format_allowlist
from agentfleet.testing.services import Stack, toolpool_only
from agentfleet.testing.stdio_allowlist import TEST_SERVER, TEST_STDIO_COMMANDS
from agentfleet.testing.waiting import wait_for
from agentfleet.v1 import toolpool_pb2, toolpool_pb2_grpc
from services.executor.tools.tool_gateway import GrpcToolGateway, ToolCallRequest
from tests.integration.test_toolpool_service import call_request, make_run

P, Q = "hostile", "victim"
CAP = 3
ENV = {
    "AGENTFLEET_MCP_STDIO_ALLOWLIST": format_allowlist(TEST_STDIO_COMMANDS),
    "AGENTFLEET_MAX_MCP_CALLS_PER_PROJECT": str(CAP),
}
HANG_S = 600  # far past the test: these calls stay in flight until cancelled
REFUSED_WITHIN_S = 2.0
"""A refusal reads the run and the whitelist, nothing of the server."""
SERVED_WITHIN_S = 5.0
"""Another project's echo on a connected session: milliseconds, on a loaded machine seconds."""


async def _add_test_server(stack: Stack, project: str, name: str) -> None:
    admin = await stack.toolpool_as(project)
    await admin.UpsertMcpServer(
        toolpool_pb2.UpsertMcpServerRequest(
            project_id=project,
            mcp_server=toolpool_pb2.McpServer(
                name=name,
                transport=toolpool_pb2.MCP_TRANSPORT_STDIO,
                command=sys.executable,
                args=[TEST_SERVER, "--transport", "stdio"],
                call_timeout=duration_pb2.Duration(seconds=HANG_S),
            ),
        )
    )


async def test_a_projects_hanging_mcp_calls_cannot_crowd_the_toolpool(
    database_url: str, db_pool: asyncpg.Pool
) -> None:
    async with toolpool_only(database_url, db_pool, ENV) as stack:
        await _add_test_server(stack, P, "hang")
        await _add_test_server(stack, Q, "tools")
        run_p = await make_run(db_pool, P, ["hang__slow", "hang__echo"])
        run_q = await make_run(db_pool, Q, ["tools__echo"])
        channel = stack.channel("toolpool", token=stack.service_tokens["executor"])
        executor = toolpool_pb2_grpc.ToolPoolServiceStub(channel)
        gateway = GrpcToolGateway(channel)  # what the executor's runs call through

        async def echo(project: str, run_id: str, tool: str) -> toolpool_pb2.CallToolResponse:
            reply = await executor.CallTool(call_request(project, run_id, tool, text="hi"))
            assert not reply.is_error, reply.error_message
            assert json_format.MessageToDict(reply.result)["structured_content"] == {"result": "hi"}
            return reply

        # Both servers connected and listed before the attack: what follows is only calls.
        await echo(P, run_p, "hang__echo")
        await echo(Q, run_q, "tools__echo")

        hanging = [
            asyncio.ensure_future(
                executor.CallTool(call_request(P, run_p, "hang__slow", seconds=HANG_S))
            )
            for _ in range(CAP + 1)
        ]
        # One past the cap ends at once; the rest wait on the server.
        done, pending = await asyncio.wait(hanging, timeout=15, return_when=asyncio.FIRST_COMPLETED)
        assert len(done) == 1, f"expected one refusal at once, {len(done)} calls ended"
        error = done.pop().exception()
        assert isinstance(error, grpc.aio.AioRpcError), error
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, error
        assert f"project {P!r} already has {CAP} MCP tool calls in progress" in (
            error.details() or ""
        )
        assert "AGENTFLEET_MAX_MCP_CALLS_PER_PROJECT" in (error.details() or "")
        assert len(pending) == CAP
        assert not any(call.done() for call in pending)

        # The project's next call, as a run makes it: refused quickly, and the model reads
        # the refusal as the call's error.
        started = time.monotonic()
        outcome = await gateway.call(
            ToolCallRequest(
                project_id=P,
                run_id=run_p,
                tool_call_id="call-next",
                tool_name="hang__echo",
                arguments={"text": "hi"},
            )
        )
        assert time.monotonic() - started < REFUSED_WITHIN_S
        assert outcome.failed  # the tool call row is failed: the call never ran
        assert outcome.error.startswith("RESOURCE_EXHAUSTED: project 'hostile' already has 3")
        assert "AGENTFLEET_MAX_MCP_CALLS_PER_PROJECT" in outcome.error
        assert outcome.result == {"error": outcome.error}

        # Another project's call to its healthy server is served meanwhile.
        started = time.monotonic()
        await echo(Q, run_q, "tools__echo")
        assert time.monotonic() - started < SERVED_WITHIN_S

        # A call that ends (here, cancelled by its caller, as a cancelled run's step
        # cancels it) gives its slot back.
        for waiting in pending:
            waiting.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

        async def served_again() -> bool:
            try:
                await echo(P, run_p, "hang__echo")
            except grpc.aio.AioRpcError as exc:
                if exc.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                    raise
                return False
            return True

        await wait_for(served_again, "the cancelled calls' slots to be freed", timeout_s=15)
