"""ExecutorService over real gRPC: two executors on one database (one serving the API only,
one running runs), a ToolPool stand-in speaking the real ToolPoolService contract, and the
stub Gemini server. The stream StartRun gives must equal what the database holds."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import asyncpg
import grpc
import pytest
from google.protobuf import json_format

from agentfleet import events
from agentfleet.auth import AllowAll
from agentfleet.gemini_stub import Call, GeminiStub, Reply, Script
from agentfleet.process.service_runtime import (
    RunningService,
    ServiceContext,
    ServiceParts,
    start_service,
)
from agentfleet.rpc.grpc_server import Registration, RunningServer, start_server
from agentfleet.testing.services import test_settings as make_settings
from agentfleet.testing.streams import stored_events_of
from agentfleet.v1 import (
    common_pb2,
    executor_pb2,
    executor_pb2_grpc,
    toolpool_pb2,
    toolpool_pb2_grpc,
)
from services.executor.registry.definitions import AgentDefinition, DefinitionRepository
from services.executor.registry.model_config import ModelConfig
from services.executor.run_path.recovery import load_conversation
from services.executor.run_server import build_executor_parts

PROJECT = "proj"
SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}}


class FakeToolPool(toolpool_pb2_grpc.ToolPoolServiceServicer):
    """ResolveTools and CallTool as the contract says, for tools echo and slow."""

    def __init__(self) -> None:
        self.slow_started = asyncio.Event()

    async def ResolveTools(self, request, context):  # type: ignore[no-untyped-def]
        known = {"echo", "slow"}
        missing = [p for p in request.patterns if "*" not in p and p not in known]
        if missing:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown tools: {', '.join(missing)}")
        tools = []
        for name in sorted(known):
            if any(p == name or p == "*" for p in request.patterns):
                parameters = json_format.ParseDict(SCHEMA, toolpool_pb2.ToolDefinition().parameters)
                tools.append(
                    toolpool_pb2.ToolDefinition(
                        name=name,
                        description=name,
                        parameters=parameters,
                        source=common_pb2.ToolSource(kind=common_pb2.TOOL_SOURCE_KIND_BUILTIN),
                        executed_by=toolpool_pb2.TOOL_EXECUTOR_TOOLPOOL,
                    )
                )
        return toolpool_pb2.ResolveToolsResponse(tools=tools)

    async def CallTool(self, request, context):  # type: ignore[no-untyped-def]
        arguments = json_format.MessageToDict(request.arguments)
        if request.tool_name == "slow":
            self.slow_started.set()
            await asyncio.Event().wait()
        response = toolpool_pb2.CallToolResponse()
        response.result.update({"echo": arguments.get("text", "")})
        return response


@dataclass(kw_only=True, slots=True)
class Executors:
    api: executor_pb2_grpc.ExecutorServiceStub
    """Executor A: serves the API, runs nothing."""
    toolpool: FakeToolPool


@pytest.fixture
async def executors(
    database_url: str, db_pool: asyncpg.Pool, gemini_stub: GeminiStub
) -> AsyncIterator[Executors]:
    toolpool = FakeToolPool()
    tool_server: RunningServer = await start_server(
        host="127.0.0.1",
        port=0,
        registrations=[
            Registration.of(toolpool_pb2, toolpool_pb2_grpc, "ToolPoolService", toolpool)
        ],
        authenticator=AllowAll(),
    )
    settings = make_settings(
        DATABASE_URL=database_url,
        AGENTFLEET_AUTH="off",
        AGENTFLEET_GEMINI_BASE_URL=gemini_stub.base_url or "",
        AGENTFLEET_TOOLPOOL_ADDR=f"127.0.0.1:{tool_server.port}",
    )

    def build(run_runs: bool):  # type: ignore[no-untyped-def]
        async def build_parts(context: ServiceContext) -> ServiceParts:
            servicer, loops, on_stop = await build_executor_parts(context, concurrency=8)
            registration = Registration.of(
                executor_pb2, executor_pb2_grpc, "ExecutorService", servicer
            )
            return ServiceParts(
                registrations=[registration],
                background=loops if run_runs else (),
                on_stop=on_stop,
            )

        return build_parts

    services: list[RunningService] = []
    try:
        for run_runs in (False, True):
            services.append(
                await start_service(
                    "executor",
                    build(run_runs),
                    settings=settings,
                    pool=db_pool,
                    database_url=database_url,
                    port=0,
                )
            )
        async with grpc.aio.insecure_channel(f"127.0.0.1:{services[0].port}") as channel:
            yield Executors(api=executor_pb2_grpc.ExecutorServiceStub(channel), toolpool=toolpool)
    finally:
        for service in services:
            await service.stop(grace_s=1.0)
        await tool_server.stop(1.0)


async def define(pool: asyncpg.Pool, tools: list[str]) -> None:
    await DefinitionRepository(pool).upsert(
        PROJECT,
        AgentDefinition(
            name="helper", system_prompt="You help.", model=ModelConfig(name="m"), tools=tools
        ),
    )


def start(input: str = "go", **kwargs) -> executor_pb2.StartRunRequest:  # type: ignore[no-untyped-def]
    return executor_pb2.StartRunRequest(
        project_id=PROJECT, agent_name="helper", input=input, **kwargs
    )


async def test_start_run_streams_what_the_database_holds(
    executors: Executors, db_pool: asyncpg.Pool, gemini_stub: GeminiStub
) -> None:
    await define(db_pool, ["echo"])
    gemini_stub.add_script(
        Script(
            name="helper",
            replies=[
                Reply(calls=[Call("echo", {"text": "a"}), Call("echo", {"text": "b"})]),
                Reply(calls=[Call("echo", {"text": "c"})]),
                Reply(text="all done"),
            ],
        )
    )
    # StartRun streams by default: transient text deltas (seq 0) besides the stored events.
    streamed = stored_events_of([e async for e in executors.api.StartRun(start(request_id="r-1"))])
    run_id = streamed[0].run_id
    assert streamed[-1].type == common_pb2.RUN_EVENT_TYPE_RUN_FINISHED
    final = streamed[-1].run_finished.run
    assert final.status == common_pb2.RUN_STATUS_COMPLETED
    assert final.summary == "all done"
    assert (final.step_count, final.tokens_in > 0) == (3, True)

    stored = await events.read_events(db_pool, project_id=PROJECT, run_id=run_id)
    row = await db_pool.fetchrow("SELECT * FROM kb.agent_runs WHERE id = $1", run_id)
    replayed = [events.to_proto(e, parent_run_id=None, trace_id=row["trace_id"]) for e in stored]
    assert [e.seq for e in streamed] == list(range(1, len(stored) + 1))
    assert streamed == replayed
    kinds = [e.type for e in streamed]
    assert kinds.count(common_pb2.RUN_EVENT_TYPE_TOOL_REQUEST) == 3
    assert kinds.count(common_pb2.RUN_EVENT_TYPE_TOOL_RESPONSE) == 3
    calls = await db_pool.fetch(
        "SELECT status, output FROM kb.agent_run_tool_calls WHERE run_id = $1", run_id
    )
    assert sorted(c["output"]["output"]["echo"] for c in calls) == ["a", "b", "c"]
    _system, contents = await load_conversation(db_pool, project_id=PROJECT, run_id=run_id)
    assert [c.role for c in contents] == ["user", "model", "user", "model", "user", "model"]

    # The same request_id streams the same run again, from the start.
    again = [e async for e in executors.api.StartRun(start(request_id="r-1"))]
    assert again == replayed
    assert await db_pool.fetchval("SELECT count(*) FROM kb.agent_runs") == 1


async def test_cancel_mid_tool_call_on_the_other_executor(
    executors: Executors, db_pool: asyncpg.Pool, gemini_stub: GeminiStub
) -> None:
    await define(db_pool, ["slow"])
    gemini_stub.add_script(
        Script(name="helper", replies=[Reply(text="Partial.", calls=[Call("slow", {})])])
    )
    run = await executors.api.TriggerRun(start())
    assert run.status == common_pb2.RUN_STATUS_QUEUED
    async with asyncio.timeout(10):
        await executors.toolpool.slow_started.wait()
    began = time.monotonic()
    reply = await executors.api.CancelRun(
        executor_pb2.CancelRunRequest(project_id=PROJECT, run_id=run.id, reason="enough")
    )
    assert reply.run.HasField("cancel_request_time")
    async with asyncio.timeout(1.0):
        while True:
            status = await db_pool.fetchval(
                "SELECT status FROM kb.agent_runs WHERE id = $1", run.id
            )
            if status == "cancelled":
                break
            await asyncio.sleep(0.02)
    assert time.monotonic() - began < 1.0
    row = await db_pool.fetchrow("SELECT * FROM kb.agent_runs WHERE id = $1", run.id)
    assert row["summary"] == "Partial."
    assert row["completed_at"] is not None
    stored = await events.read_events(db_pool, project_id=PROJECT, run_id=run.id)
    responses = [e.event for e in stored if isinstance(e.event, events.ToolResponse)]
    assert len(responses) == 1
    assert responses[0].status == "failed"
    assert stored[-1].event.type == "run_finished"


async def test_unknown_agent_and_bad_fields(executors: Executors, db_pool: asyncpg.Pool) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as missing:
        await executors.api.TriggerRun(start())
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND
    assert "helper" in (missing.value.details() or "")
    await define(db_pool, [])
    bad = executor_pb2.StartRunRequest(project_id=PROJECT, input="", max_steps=0)
    with pytest.raises(grpc.aio.AioRpcError) as invalid:
        await executors.api.TriggerRun(bad)
    assert invalid.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    details = invalid.value.details() or ""
    assert "agent_name" in details
    assert "input" in details
    assert "max_steps" in details
    with pytest.raises(grpc.aio.AioRpcError) as streamed:
        async for _ in executors.api.StartRun(start(timeout={"seconds": -1})):
            pass
    assert streamed.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "timeout" in (streamed.value.details() or "")


async def test_missing_whitelisted_tool_fails_at_start(
    executors: Executors, db_pool: asyncpg.Pool
) -> None:
    await define(db_pool, ["echo", "ghost"])
    streamed = [e async for e in executors.api.StartRun(start())]
    final = streamed[-1].run_finished.run
    assert final.status == common_pb2.RUN_STATUS_FAILED
    assert "ghost" in final.error_message


async def test_resume_run_streams_the_continuation_once_per_request_id(
    executors: Executors, db_pool: asyncpg.Pool, gemini_stub: GeminiStub
) -> None:
    await define(db_pool, ["echo"])
    gemini_stub.add_script(
        Script(
            name="helper",
            replies=[
                Reply(calls=[Call("echo", {"text": "a"})]),
                Reply(text="summary one"),
                Reply(text="done"),
            ],
        )
    )
    first = [e async for e in executors.api.StartRun(start(max_steps=1))]
    paused = first[-1].run_finished.run
    assert paused.status == common_pb2.RUN_STATUS_PAUSED
    assert paused.summary == "summary one"

    resume = executor_pb2.ResumeRunRequest(
        project_id=PROJECT, run_id=paused.id, input="keep going", max_steps=3, request_id="res-1"
    )
    resumed = stored_events_of([e async for e in executors.api.ResumeRun(resume)])
    # One event sequence across both executions: no gap, no repeat.
    assert resumed[0].seq == first[-1].seq + 1
    assert [e.seq for e in resumed] == list(range(resumed[0].seq, resumed[-1].seq + 1))
    finished = resumed[-1].run_finished.run
    assert (finished.status, finished.summary) == (common_pb2.RUN_STATUS_COMPLETED, "done")
    assert finished.resume_count == 1
    assert finished.total_steps == paused.total_steps + 1

    _system, contents = await load_conversation(db_pool, project_id=PROJECT, run_id=paused.id)
    texts = [p.text for c in contents for p in c.parts or [] if p.text]
    assert "keep going" in texts
    assert texts[-1] == "done"

    # The same request id streams the same execution again; nothing is resumed twice.
    again = [e async for e in executors.api.ResumeRun(resume)]
    assert [e.seq for e in again][-1] == resumed[-1].seq
    row = await db_pool.fetchrow(
        "SELECT resume_count, status FROM kb.agent_runs WHERE id = $1::uuid", paused.id
    )
    assert (row["resume_count"], row["status"]) == (1, "completed")

    other = executor_pb2.ResumeRunRequest(project_id=PROJECT, run_id=paused.id, request_id="res-2")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        [e async for e in executors.api.ResumeRun(other)]
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
