"""Crash recovery and graceful shutdown with real executor processes: SIGKILL mid tool call,
SIGTERM with 20 runs in flight. The ToolPool is an in-process gRPC server speaking the real
ToolPoolService contract that counts every execution; the model is the stub Gemini server."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest
from google.protobuf import json_format

from agentfleet import events
from agentfleet.gemini_stub import Call, GeminiStub, Reply, Script, StubRequest
from agentfleet.testing.services import ProcessStack
from agentfleet.testing.waiting import wait_for_query
from agentfleet.v1 import common_pb2, toolpool_pb2, toolpool_pb2_grpc
from services.executor.queue import RunQueue
from services.executor.registry.definitions import AgentDefinition, DefinitionRepository
from services.executor.registry.model_config import ModelConfig
from services.executor.runs import StartRunParams
from tests.e2e.lone_executor import serve_toolpool, start_executor

PROJECT = "proj"
SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}}


class CountingToolPool(toolpool_pb2_grpc.ToolPoolServiceServicer):
    """Tools ``echo`` and ``slow`` (never answers); counts executions per tool_call_id."""

    def __init__(self) -> None:
        self.executions: collections.Counter[tuple[str, str]] = collections.Counter()
        self.slow_started = asyncio.Event()

    async def ResolveTools(self, request, context):  # type: ignore[no-untyped-def]
        parameters = json_format.ParseDict(SCHEMA, toolpool_pb2.ToolDefinition().parameters)
        return toolpool_pb2.ResolveToolsResponse(
            tools=[
                toolpool_pb2.ToolDefinition(
                    name=name,
                    description=name,
                    parameters=parameters,
                    source=common_pb2.ToolSource(kind=common_pb2.TOOL_SOURCE_KIND_BUILTIN),
                    executed_by=toolpool_pb2.TOOL_EXECUTOR_TOOLPOOL,
                )
                for name in ("echo", "slow")
                if name in request.patterns
            ]
        )

    async def CallTool(self, request, context):  # type: ignore[no-untyped-def]
        self.executions[(request.run_id, request.tool_call_id)] += 1
        if request.tool_name == "slow":
            self.slow_started.set()
            await asyncio.Event().wait()
        response = toolpool_pb2.CallToolResponse()
        response.result.update(json_format.MessageToDict(request.arguments))
        return response


@pytest.fixture
async def toolpool() -> AsyncIterator[tuple[CountingToolPool, str]]:
    servicer = CountingToolPool()
    async with serve_toolpool(servicer) as address:
        yield servicer, address


def settings(concurrency: int) -> dict[str, str]:
    return {
        "AGENTFLEET_EXECUTOR_CONCURRENCY": str(concurrency),
        "AGENTFLEET_SHUTDOWN_GRACE_S": "10",
    }


async def define(pool: asyncpg.Pool, tools: list[str]) -> None:
    await DefinitionRepository(pool).upsert(
        PROJECT,
        AgentDefinition(
            name="agent", system_prompt="You are agent.", model=ModelConfig(name="m"), tools=tools
        ),
    )


async def enqueue(pool: asyncpg.Pool) -> str:
    run, _ = await RunQueue(pool).enqueue(
        StartRunParams(project_id=PROJECT, agent_name="agent", agent_definition_id=None, input="go")
    )
    return run.id


async def check_events(pool: asyncpg.Pool, run_id: str) -> list[events.RunEvent]:
    """The run's events: gapless, no seq repeated, every TOOL_REQUEST answered once."""
    stored = await events.read_events(
        pool, project_id=PROJECT, run_id=run_id, include_internal=True
    )
    assert [e.seq for e in stored] == list(range(1, len(stored) + 1))
    found = [e.event for e in stored]
    requests = [e.tool_call_id for e in found if isinstance(e, events.ToolRequest)]
    responses = [e.tool_call_id for e in found if isinstance(e, events.ToolResponse)]
    assert sorted(requests) == sorted(responses)
    assert len(set(responses)) == len(responses)
    return found


async def test_sigkill_mid_tool_call_second_executor_finishes_the_run(
    database_url: str,
    db_pool: asyncpg.Pool,
    gemini_stub: GeminiStub,
    toolpool: tuple[CountingToolPool, str],
    tmp_path: Path,
) -> None:
    pool_servicer, toolpool_addr = toolpool
    gemini_stub.add_script(
        Script(
            name="agent",
            replies=[
                Reply(text="starting the slow job", calls=[Call("slow", {"text": "x"})]),
                Reply(text="the slow job was interrupted; done anyway"),
            ],
        )
    )
    await define(db_pool, ["slow"])
    first = await start_executor(
        database_url, tmp_path / "a", gemini_stub, toolpool_addr, **settings(4)
    )
    second: ProcessStack | None = None
    try:
        run_id = await enqueue(db_pool)
        async with asyncio.timeout(20):
            await pool_servicer.slow_started.wait()
        process = first.processes["executor"]
        process.kill()
        await process.wait()
        second = await start_executor(
            database_url, tmp_path / "b", gemini_stub, toolpool_addr, **settings(4)
        )
        await wait_for_query(
            db_pool,
            "SELECT status = 'completed' FROM kb.agent_runs WHERE id = $1",
            run_id,
            timeout_s=60.0,
        )
    finally:
        await first.stop(grace_s=2.0)
        if second is not None:
            await second.stop(grace_s=5.0)

    row = await db_pool.fetchrow("SELECT * FROM kb.agent_runs WHERE id = $1", run_id)
    assert row["summary"] == "the slow job was interrupted; done anyway"
    (call,) = await db_pool.fetch(
        "SELECT tool_call_id, status, error FROM kb.agent_run_tool_calls WHERE run_id = $1",
        run_id,
    )
    assert call["status"] == "interrupted"
    assert "interrupted" in call["error"]
    assert pool_servicer.executions[(run_id, call["tool_call_id"])] == 1  # never run twice
    found = await check_events(db_pool, run_id)
    started = [e for e in found if isinstance(e, events.RunStarted)]
    assert [s.recovered for s in started] == [False, True]
    assert started[0].worker != started[1].worker
    response = next(e for e in found if isinstance(e, events.ToolResponse))
    assert response.status == "interrupted"
    # The model was told: the recovered conversation carries the error result.
    sent = gemini_stub.requests[-1].function_responses()
    assert "interrupted" in sent[-1]["response"]["error"]


async def test_sigterm_with_20_running_runs_hands_them_all_to_the_other_executor(
    database_url: str,
    db_pool: asyncpg.Pool,
    gemini_stub: GeminiStub,
    toolpool: tuple[CountingToolPool, str],
    tmp_path: Path,
) -> None:
    pool_servicer, toolpool_addr = toolpool
    # After its first step every run waits on this gate inside a model call, so all 20
    # are mid-way when SIGTERM arrives, however slowly this machine starts processes.
    gate = asyncio.Event()

    async def ten_steps(request: StubRequest) -> Reply:
        if request.turn >= 1:
            await gate.wait()
        if request.turn < 10:
            return Reply(calls=[Call("echo", {"text": f"step {request.turn}"})])
        return Reply(text="all done")

    gemini_stub.add_script(Script(name="agent", policy=ten_steps))
    await define(db_pool, ["echo"])
    first = await start_executor(
        database_url, tmp_path / "a", gemini_stub, toolpool_addr, **settings(20)
    )
    second: ProcessStack | None = None
    try:
        run_ids = [await enqueue(db_pool) for _ in range(20)]
        # All 20 running on the first executor, each past its first step.
        await wait_for_query(
            db_pool,
            "SELECT count(*) = 20 FROM kb.agent_runs WHERE id = ANY($1::uuid[]) "
            "AND status = 'running' AND step_count >= 1",
            run_ids,
            timeout_s=60.0,
        )
        second = await start_executor(
            database_url, tmp_path / "b", gemini_stub, toolpool_addr, **settings(20)
        )
        process = first.processes["executor"]
        process.terminate()
        # The first executor lets each in-flight step finish, then hands the run over.
        gate.set()
        assert await asyncio.wait_for(process.wait(), 20) == 0
        await wait_for_query(
            db_pool,
            "SELECT count(*) = 20 FROM kb.agent_runs WHERE id = ANY($1::uuid[]) "
            "AND status = 'completed'",
            run_ids,
            timeout_s=60.0,
        )
    finally:
        await first.stop(grace_s=2.0)
        if second is not None:
            await second.stop(grace_s=5.0)

    second_pid = f":{second.processes['executor'].pid}:"
    for run_id in run_ids:
        found = await check_events(db_pool, run_id)
        started = [e for e in found if isinstance(e, events.RunStarted)]
        # Begun on the first, continued on the second.
        assert len(started) == 2, run_id
        assert second_pid in started[-1].worker
        assert started[-1].recovered
        finished = [e for e in found if isinstance(e, events.RunFinished)]
        assert len(finished) == 1
        calls = await db_pool.fetch(
            "SELECT tool_call_id, status FROM kb.agent_run_tool_calls WHERE run_id = $1", run_id
        )
        # Shutdown waited for each step: nothing interrupted, nothing run twice.
        assert [c["status"] for c in calls] == ["completed"] * 10
        assert all(pool_servicer.executions[(run_id, c["tool_call_id"])] == 1 for c in calls)
