"""GetRun shows the limits that bound a run, also when they come from its definition: unset
there means none (history.proto), so a run bounded by its agent's default_timeout_s and
max_steps carries them from its start, and a later change of the definition leaves it be."""

from __future__ import annotations

from agentfleet.testing.services import Stack
from agentfleet.v1 import (
    common_pb2,
    executor_pb2,
    executor_pb2_grpc,
    history_pb2,
    history_pb2_grpc,
)
from services.executor.registry.definitions import AgentDefinition, DefinitionRepository

PROJECT = "alpha"


async def test_a_runs_limits_from_its_definition_are_shown_and_kept(stack: Stack) -> None:
    definitions = DefinitionRepository(stack.pool)
    limited = AgentDefinition(
        name="bounded", system_prompt="b", default_timeout_s=90.5, max_steps=7
    )
    await definitions.upsert(PROJECT, limited)
    await definitions.upsert(PROJECT, AgentDefinition(name="free", system_prompt="f"))
    token = await stack.create_token(PROJECT)
    executor = executor_pb2_grpc.ExecutorServiceStub(stack.channel("executor", token=token))
    history = history_pb2_grpc.HistoryServiceStub(stack.channel("history", token=token))

    async def started(agent: str) -> common_pb2.AgentRun:
        request = executor_pb2.StartRunRequest(project_id=PROJECT, agent_name=agent, input="x")
        run = await executor.TriggerRun(request)
        return (
            await history.GetRun(history_pb2.GetRunRequest(project_id=PROJECT, run_id=run.id))
        ).run

    bounded = await started("bounded")
    assert bounded.timeout.ToTimedelta().total_seconds() == 90.5
    assert bounded.max_steps == 7
    await definitions.upsert(
        PROJECT, AgentDefinition(name="bounded", system_prompt="b", default_timeout_s=5)
    )
    again = await history.GetRun(history_pb2.GetRunRequest(project_id=PROJECT, run_id=bounded.id))
    assert (again.run.timeout.ToTimedelta().total_seconds(), again.run.max_steps) == (90.5, 7)
    free = await started("free")
    assert not free.HasField("timeout")
    assert not free.HasField("max_steps")
