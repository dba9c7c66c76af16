"""A run queued for an agent whose definition is deleted meanwhile (DeleteAgentDefinition, a
product upgrade removing the agent) between StartRun/TriggerRun reading it and the insert:
NOT_FOUND naming the agent, as for an agent that was never there, and nothing written --
not INTERNAL from the foreign key. For spawn_agents, only that child fails: the batch's
others start and run. Deterministic: the definition is deleted right after the read, before
the insert, every time. Real PostgreSQL, real gRPC on loopback, the stub model."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import asyncpg
import grpc
import pytest

from agentfleet.auth import AllowAll
from agentfleet.errors import NotFound
from agentfleet.gemini_stub import Call, GeminiStub, Reply, Script, StubRequest
from agentfleet.postgres.db import Listener
from agentfleet.rpc.grpc_server import Registration, start_server
from agentfleet.runs.run_watch import RunWatch
from agentfleet.v1 import executor_pb2, executor_pb2_grpc
from services.dispatcher.runs import GrpcRunControl, RunRequest, TriggerRefused
from services.executor.queue import RunQueue
from services.executor.registry.definitions import AgentDefinition, DefinitionRepository
from services.executor.run_server import ExecutorServicer
from services.executor.runs import StartRunParams
from tests.integration import coordination_harness
from tests.integration.coordination_harness import running_executor

PROJECT = "proj"
AGENT = "doomed"
GONE = f"agent {AGENT!r} not found in project {PROJECT!r}"


async def nothing_written(pool: asyncpg.Pool) -> bool:
    runs = await pool.fetchval("SELECT count(*) FROM kb.agent_runs")
    stored = await pool.fetchval("SELECT count(*) FROM kb.agent_run_events")
    return (runs, stored) == (0, 0)


class DeletedAfterRead(DefinitionRepository):
    """AGENT's definition, deleted right after StartRun/TriggerRun/spawn_agents reads it:
    the delete that commits between the read and the insert. Other agents are left alone."""

    async def get(self, project_id: str, name: str) -> AgentDefinition:
        definition = await super().get(project_id, name)
        if name == AGENT:
            await self.delete(project_id, name)
        return definition


@dataclass(kw_only=True, slots=True)
class Api:
    stub: executor_pb2_grpc.ExecutorServiceStub
    channel: grpc.aio.Channel


@pytest.fixture
async def api(db_pool: asyncpg.Pool, database_url: str) -> AsyncIterator[Api]:
    async with Listener(database_url) as listener:
        watch = RunWatch(pool=db_pool, listener=listener)
        await watch.start()
        servicer = ExecutorServicer(
            pool=db_pool,
            queue=RunQueue(db_pool),
            definitions=DeletedAfterRead(db_pool),
            watch=watch,
        )
        server = await start_server(
            host="127.0.0.1",
            port=0,
            registrations=[
                Registration.of(executor_pb2, executor_pb2_grpc, "ExecutorService", servicer)
            ],
            authenticator=AllowAll(),
        )
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
                yield Api(stub=executor_pb2_grpc.ExecutorServiceStub(channel), channel=channel)
        finally:
            await server.stop(1.0)
            await watch.close()


async def define(pool: asyncpg.Pool) -> str:
    stored = await DefinitionRepository(pool).upsert(PROJECT, AgentDefinition(name=AGENT))
    return str(stored.definition.id)


@pytest.mark.parametrize("request_id", [None, "req-1"])
async def test_enqueue_for_a_definition_just_deleted_is_not_found(
    db_pool: asyncpg.Pool, request_id: str | None
) -> None:
    definition_id = await define(db_pool)
    await DefinitionRepository(db_pool).delete(PROJECT, AGENT)
    params = StartRunParams(
        project_id=PROJECT,
        agent_name=AGENT,
        agent_definition_id=definition_id,
        input="go",
        request_id=request_id,
    )
    with pytest.raises(NotFound) as caught:
        await RunQueue(db_pool).enqueue(params)
    assert str(caught.value) == GONE
    assert await nothing_written(db_pool)


async def test_trigger_and_start_racing_the_delete_answer_not_found(
    api: Api, db_pool: asyncpg.Pool
) -> None:
    request = executor_pb2.StartRunRequest(
        project_id=PROJECT, agent_name=AGENT, input="go", request_id="r-1"
    )
    await define(db_pool)
    with pytest.raises(grpc.aio.AioRpcError) as triggered:
        await api.stub.TriggerRun(request)
    assert (triggered.value.code(), triggered.value.details()) == (grpc.StatusCode.NOT_FOUND, GONE)
    assert await nothing_written(db_pool)

    await define(db_pool)
    with pytest.raises(grpc.aio.AioRpcError) as started:
        [e async for e in api.stub.StartRun(request)]
    assert (started.value.code(), started.value.details()) == (grpc.StatusCode.NOT_FOUND, GONE)
    assert await nothing_written(db_pool)


async def test_the_dispatcher_takes_it_as_a_refusal_naming_the_agent(
    api: Api, db_pool: asyncpg.Pool
) -> None:
    """TriggerRefused fails the attempt at once (the task's own retries and backoff apply),
    where INTERNAL was retried as transient and then left to the task's lease."""
    await define(db_pool)
    control = GrpcRunControl(api.channel)
    with pytest.raises(TriggerRefused, match=GONE):
        await control.trigger(
            RunRequest(
                project_id=PROJECT,
                agent_name=AGENT,
                input="go",
                request_id="session-1",
                task_id="",
                timeout_s=None,
            )
        )
    assert await nothing_written(db_pool)


async def test_spawn_agents_racing_the_delete_fails_only_that_child(
    db_pool: asyncpg.Pool, database_url: str, gemini_stub: GeminiStub
) -> None:
    """The model is told that child could not start, as for an agent that was never there;
    its siblings in the same batch start and complete."""
    outputs: list[dict[str, Any]] = []

    def parent(request: StubRequest) -> Reply:
        if request.turn == 0:
            tasks = [
                {"agent_name": "worker", "description": "a", "prompt": "task a"},
                {"agent_name": AGENT, "description": "b", "prompt": "task b"},
                {"agent_name": "worker", "description": "c", "prompt": "task c"},
            ]
            return Reply(calls=[Call("spawn_agents", {"tasks": tasks})])
        outputs.append(request.function_responses()[-1]["response"])
        return Reply(text="done")

    gemini_stub.add_script(Script(name="parent", match_system="You are parent.", policy=parent))
    gemini_stub.add_script(
        Script(
            name="worker",
            match_system="You are worker.",
            replies=[Reply(text="worked")],
            per_conversation=True,
        )
    )
    async with running_executor(
        db_pool, database_url, gemini_stub, definitions=DeletedAfterRead(db_pool)
    ) as fleet:
        for name in ("parent", "worker", AGENT):
            await fleet.define(name, tools=["spawn_agents"] if name == "parent" else [])
        final = await fleet.wait((await fleet.start("parent")).id)
        children = await fleet.children(final.id)
        (spawn_call,) = await fleet.tool_calls(final.id)
        started = [e for e in await fleet.events(final.id) if e.type == "child_run_started"]

    assert (final.status, final.error_message) == ("completed", None)
    (output,) = outputs
    assert "error" not in output  # partial success is success
    results = output["output"]["results"]
    assert [(r["description"], r["status"], r["summary"]) for r in results] == [
        ("a", "completed", "worked"),
        ("c", "completed", "worked"),
    ]
    gone = f"agent {AGENT!r} not found in project {coordination_harness.PROJECT!r}"
    assert output["output"]["failed"] == [{"agent_name": AGENT, "description": "b", "error": gone}]
    assert sorted(c.agent_name for c in children) == ["worker", "worker"]
    assert sorted(map(str, spawn_call["child_run_ids"])) == sorted(c.id for c in children)
    assert len(started) == 2
