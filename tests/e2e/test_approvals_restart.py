"""A run waiting for approval survives its executor (issue #19), with real executor
processes: executor A holds the call and is killed; executor B, started afterwards, takes
the DecideToolCall and finishes the run. The ToolPool is an in-process gRPC server speaking
the real ToolPoolService contract that counts every execution; the model is the stub."""

from __future__ import annotations

import collections
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest
from google.protobuf import json_format

from agentfleet import events
from agentfleet.gemini_stub import Call, GeminiStub, Reply, Script, StubRequest
from agentfleet.rpc.clients import open_channel
from agentfleet.testing.checks.invariants import assert_invariants
from agentfleet.testing.services import ProcessStack
from agentfleet.testing.waiting import wait_for_query
from agentfleet.v1 import (
    common_pb2,
    executor_pb2,
    executor_pb2_grpc,
    toolpool_pb2,
    toolpool_pb2_grpc,
)
from services.executor.registry.definitions import AgentDefinition, DefinitionRepository
from tests.e2e.lone_executor import serve_toolpool, start_executor

PROJECT = "proj"
SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}}


class CountingToolPool(toolpool_pb2_grpc.ToolPoolServiceServicer):
    """Tool ``echo``; counts executions per (run, tool_call_id) and keeps their arguments."""

    def __init__(self) -> None:
        self.executions: collections.Counter[tuple[str, str]] = collections.Counter()
        self.arguments: list[dict[str, object]] = []

    async def ResolveTools(self, request, context):  # type: ignore[no-untyped-def]
        parameters = json_format.ParseDict(SCHEMA, toolpool_pb2.ToolDefinition().parameters)
        return toolpool_pb2.ResolveToolsResponse(
            tools=[
                toolpool_pb2.ToolDefinition(
                    name="echo",
                    description="echo",
                    parameters=parameters,
                    source=common_pb2.ToolSource(kind=common_pb2.TOOL_SOURCE_KIND_BUILTIN),
                    executed_by=toolpool_pb2.TOOL_EXECUTOR_TOOLPOOL,
                )
            ]
        )

    async def CallTool(self, request, context):  # type: ignore[no-untyped-def]
        self.executions[(request.run_id, request.tool_call_id)] += 1
        arguments = json_format.MessageToDict(request.arguments)
        self.arguments.append(arguments)
        response = toolpool_pb2.CallToolResponse()
        response.result.update(arguments)
        return response


@pytest.fixture
async def toolpool() -> AsyncIterator[tuple[CountingToolPool, str]]:
    servicer = CountingToolPool()
    async with serve_toolpool(servicer) as address:
        yield servicer, address


def careful(request: StubRequest) -> Reply:
    responses = request.function_responses()
    if not responses:
        return Reply(text="echoing", calls=[Call("echo", {"text": "from the model"})])
    return Reply(text=f"done: {responses[-1]['response']}")


async def test_a_waiting_run_survives_its_executor_and_continues_on_another(
    database_url: str,
    db_pool: asyncpg.Pool,
    gemini_stub: GeminiStub,
    toolpool: tuple[CountingToolPool, str],
    tmp_path: Path,
) -> None:
    servicer, toolpool_addr = toolpool
    gemini_stub.add_script(Script(name="careful", policy=careful))
    await DefinitionRepository(db_pool).upsert(
        PROJECT,
        AgentDefinition(
            name="careful",
            system_prompt="You are careful.",
            tools=["echo"],
            config={"approvals": {"rules": [{"tools": ["echo"]}]}},
        ),
    )
    first = await start_executor(database_url, tmp_path / "a", gemini_stub, toolpool_addr)
    second: ProcessStack | None = None
    try:
        async with open_channel(first.addresses["executor"]) as channel:
            run = await executor_pb2_grpc.ExecutorServiceStub(channel).TriggerRun(
                executor_pb2.StartRunRequest(project_id=PROJECT, agent_name="careful", input="go")
            )
        await wait_for_query(
            db_pool,
            "SELECT status = 'waiting' FROM kb.agent_runs WHERE id = $1",
            run.id,
            timeout_s=60.0,
        )
        process = first.processes["executor"]
        process.kill()
        await process.wait()
        assert servicer.executions == {}  # nothing ran while it waited

        second = await start_executor(database_url, tmp_path / "b", gemini_stub, toolpool_addr)
        tool_call_id = await db_pool.fetchval(
            "SELECT tool_call_id FROM kb.agent_run_tool_calls WHERE run_id = $1", run.id
        )
        request = executor_pb2.DecideToolCallRequest(
            project_id=PROJECT,
            run_id=run.id,
            tool_call_id=tool_call_id,
            decision=executor_pb2.TOOL_CALL_DECISION_APPROVE,
            request_id="approve-1",
        )
        request.arguments.update({"text": "edited by a person"})
        async with open_channel(second.addresses["executor"]) as channel:
            reply = await executor_pb2_grpc.ExecutorServiceStub(channel).DecideToolCall(request)
        assert reply.status == common_pb2.TOOL_CALL_STATUS_APPROVED
        await wait_for_query(
            db_pool,
            "SELECT status = 'completed' FROM kb.agent_runs WHERE id = $1",
            run.id,
            timeout_s=60.0,
        )
    finally:
        await first.stop(grace_s=2.0)
        if second is not None:
            await second.stop(grace_s=5.0)

    assert servicer.executions == {(run.id, tool_call_id): 1}
    assert servicer.arguments == [{"text": "edited by a person"}]
    stored = await events.read_events(db_pool, project_id=PROJECT, run_id=run.id)
    started = [e.event for e in stored if isinstance(e.event, events.RunStarted)]
    assert len(started) == 2
    assert started[0].worker != started[1].worker
    assert f":{second.processes['executor'].pid}:" in started[1].worker
    summary = await db_pool.fetchval("SELECT summary FROM kb.agent_runs WHERE id = $1", run.id)
    assert "edited by a person" in summary
    await assert_invariants(db_pool, project_id=PROJECT)
