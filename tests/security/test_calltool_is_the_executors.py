"""CallTool runs a tool inside a run, for that run's loop (auth.SERVICE_ONLY_METHODS): a
tenant token (member or admin) that called it for a running run of its project would run a
tool the run's approval rule holds for a decision, with arguments the model never wrote,
and leave no tool-call row. Only the executor's identity may call it."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf import json_format, struct_pb2

from agentfleet.gemini_stub import Reply, Script
from agentfleet.testing.waiting import wait_for_query
from agentfleet.v1 import executor_pb2, toolpool_pb2, toolpool_pb2_grpc
from tests.integration.approval_harness import PROJECT, Deployment, deployment

__all__ = ["deployment"]

PROMPT = "You are a slow clerk."


@pytest.mark.parametrize("caller", ["member", "admin"])
async def test_a_tenant_token_cannot_run_a_tool_of_a_running_run(
    deployment: Deployment, caller: str
) -> None:
    deployment.stub.add_script(Script(name="slow", match_system=PROMPT, replies=[Reply(hang=True)]))
    # The run may call create_entity only once an admin approves the call.
    await deployment.define(
        "slow-clerk",
        system_prompt=PROMPT,
        tools=["create_entity"],
        config={"approvals": {"rules": [{"tools": ["create_entity"]}]}},
    )
    run_id = await deployment.trigger("slow-clerk", input="think for a while")
    await wait_for_query(
        deployment.pool, "SELECT status = 'running' FROM kb.agent_runs WHERE id = $1", run_id
    )
    toolpool = toolpool_pb2_grpc.ToolPoolServiceStub(
        deployment.stack.channel("toolpool", token=deployment.tokens[caller])
    )
    try:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await toolpool.CallTool(
                toolpool_pb2.CallToolRequest(
                    project_id=PROJECT,
                    run_id=run_id,
                    tool_call_id="forged-1",
                    tool_name="create_entity",
                    arguments=json_format.ParseDict(
                        {"type": "Note", "key": "bypass"}, struct_pb2.Struct()
                    ),
                )
            )
    finally:
        await deployment.executor().CancelRun(
            executor_pb2.CancelRunRequest(project_id=PROJECT, run_id=run_id)
        )
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert (
        await deployment.pool.fetchval(
            "SELECT count(*) FROM kb.graph_objects WHERE project_id = $1 AND key = 'bypass'",
            PROJECT,
        )
        == 0
    )
    assert (
        await deployment.pool.fetchval(
            "SELECT count(*) FROM kb.agent_run_tool_calls WHERE run_id = $1", run_id
        )
        == 0
    )
