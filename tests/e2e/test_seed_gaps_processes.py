"""Issue 37's cross-service items on real processes (the session's fleet: toolpool, two
executors and two histories with auth on), through the public gRPC API only:

- item 2: an ``internal`` agent is refused to a project's token on StartRun and TriggerRun,
  naming the visibility, and nothing is written;
- item 8: a tool call that its MCP server never answered (a call timeout) is FAILED with its
  error once, a tool's own error result is COMPLETED with ``is_error``, and
  ListRunToolCalls' status filter tells them apart.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import grpc
import pytest
from google.protobuf import duration_pb2

from agentfleet.gemini_stub import Call, Reply, Script
from agentfleet.v1 import common_pb2, executor_pb2, history_pb2, registry_pb2, toolpool_pb2
from tests.e2e.conftest import Fleet

TEST_SERVER = str(Path(__file__).parents[2] / "examples" / "mcp" / "test_server" / "server.py")
S = common_pb2.ToolCallStatus


async def test_an_internal_agent_is_refused_to_a_project_token(fleet: Fleet) -> None:
    project = await fleet.project("internal")
    await project.registry().UpsertAgentDefinition(
        registry_pb2.UpsertAgentDefinitionRequest(
            project_id=project.project_id,
            agent_definition=common_pb2.AgentDefinition(
                name="helper",
                system_prompt="You help other agents only.",
                model=common_pb2.ModelConfig(name="gemini-e2e"),
                visibility=common_pb2.VISIBILITY_INTERNAL,
            ),
        )
    )
    request = executor_pb2.StartRunRequest(
        project_id=project.project_id, agent_name="helper", input="go"
    )
    executor = project.executor("executor-b")
    with pytest.raises(grpc.aio.AioRpcError) as triggered:
        await executor.TriggerRun(request)
    assert triggered.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "internal" in (triggered.value.details() or "")
    with pytest.raises(grpc.aio.AioRpcError) as started:
        async for _ in executor.StartRun(request):
            pass
    assert started.value.code() == grpc.StatusCode.PERMISSION_DENIED
    runs = await fleet.pool.fetchval(
        "SELECT count(*) FROM kb.agent_runs WHERE project_id = $1", project.project_id
    )
    assert runs == 0


async def test_a_call_never_answered_is_failed_and_an_error_result_is_completed(
    fleet: Fleet,
) -> None:
    project = await fleet.project("toolstatus")
    marker = f"[{project.project_id}]"
    await project.toolpool().UpsertMcpServer(
        toolpool_pb2.UpsertMcpServerRequest(
            project_id=project.project_id,
            mcp_server=toolpool_pb2.McpServer(
                name="test",
                transport=toolpool_pb2.MCP_TRANSPORT_STDIO,
                command=sys.executable,
                args=[TEST_SERVER, "--transport", "stdio"],
                call_timeout=duration_pb2.Duration(nanos=500_000_000),
            ),
        )
    )
    await project.define(
        "caller", system_prompt=f"You call tools. {marker}", tools=["test__slow", "test__fail"]
    )
    fleet.stub.add_script(
        Script(
            name=marker,
            match_system=marker,
            replies=[
                Reply(
                    text="Trying both.",
                    calls=[Call("test__slow", {"seconds": 30}), Call("test__fail", {})],
                ),
                Reply(text="One timed out, one failed."),
            ],
        )
    )
    run = await project.executor("executor-a").TriggerRun(
        executor_pb2.StartRunRequest(project_id=project.project_id, agent_name="caller", input="go")
    )
    history = project.history("history-b")
    async with asyncio.timeout(60):
        async for _ in history.WatchRun(
            history_pb2.WatchRunRequest(project_id=project.project_id, run_id=run.id)
        ):
            pass

    async def calls(*statuses: int) -> dict[str, history_pb2.ToolCallSummary]:
        reply = await history.ListRunToolCalls(
            history_pb2.ListRunToolCallsRequest(
                project_id=project.project_id, run_id=run.id, statuses=list(statuses)
            )
        )
        return {c.tool_name: c for c in reply.tool_calls}

    everything = await calls()
    assert set(everything) == {"test__slow", "test__fail"}
    failed = await calls(S.TOOL_CALL_STATUS_FAILED)
    assert set(failed) == {"test__slow"}
    assert failed["test__slow"].error_preview, "a failed call carries its error"
    reply = await history.GetRunToolCall(
        history_pb2.GetRunToolCallRequest(
            project_id=project.project_id,
            run_id=run.id,
            tool_call_id=failed["test__slow"].tool_call_id,
        )
    )
    full = reply.tool_call
    assert full.error
    # What the model was given: the error, once (it was {error, output: {error}} before).
    assert dict(full.output) == {"error": full.error}
    completed = await calls(S.TOOL_CALL_STATUS_COMPLETED)
    assert set(completed) == {"test__fail"}, "a tool's own error result is an answer"
