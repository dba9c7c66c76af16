"""A run queued for an agent whose definition is deleted meanwhile (DeleteAgentDefinition, a
product upgrade removing the agent) between StartRun/TriggerRun reading it and the insert:
NOT_FOUND naming the agent, as for an agent that was never there, and nothing written --
not INTERNAL from the foreign key. Deterministic: the definition is deleted right after the
read, before the insert, every time. Real PostgreSQL, real gRPC on loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import asyncpg
import grpc
import pytest

from agentfleet.auth import AllowAll
from agentfleet.db import Listener
from agentfleet.errors import NotFound
from agentfleet.grpc_server import Registration, start_server
from agentfleet.run_watch import RunWatch
from agentfleet.v1 import executor_pb2, executor_pb2_grpc
from services.dispatcher.runs import GrpcRunControl, RunRequest, TriggerRefused
from services.executor.queue import RunQueue
from services.executor.registry.definitions import AgentDefinition, DefinitionRepository
from services.executor.run_server import ExecutorServicer
from services.executor.runs import StartRunParams

PROJECT = "proj"
AGENT = "doomed"
GONE = f"agent {AGENT!r} not found in project {PROJECT!r}"


async def nothing_written(pool: asyncpg.Pool) -> bool:
    runs = await pool.fetchval("SELECT count(*) FROM kb.agent_runs")
    stored = await pool.fetchval("SELECT count(*) FROM kb.agent_run_events")
    return (runs, stored) == (0, 0)


class DeletedAfterRead(DefinitionRepository):
    """The definitions, each deleted right after StartRun/TriggerRun reads it: the delete
    that commits between the read and the insert."""

    async def get(self, project_id: str, name: str) -> AgentDefinition:
        definition = await super().get(project_id, name)
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
