"""Internal agents are for agents only (seed 000 D6): a project's token, member or admin,
cannot start one with StartRun or TriggerRun; spawn_agents and the dispatcher (its service
token) can. Refused with PERMISSION_DENIED naming the visibility, and no run is written."""

from __future__ import annotations

import grpc
import pytest

from agentfleet.v1 import executor_pb2
from services.executor.registry.definitions import AgentDefinition, DefinitionRepository
from tests.security.test_executor_admission import PROJECT, Deployment, deployment

__all__ = ["deployment"]


@pytest.mark.parametrize("caller", ["member", "admin"])
async def test_a_project_token_cannot_start_an_internal_agent(
    deployment: Deployment, caller: str
) -> None:
    pool = deployment.stack.pool
    await DefinitionRepository(pool).upsert(
        PROJECT, AgentDefinition(name="plumbing", system_prompt="p", visibility="internal")
    )
    executor = deployment.executor(caller)
    request = executor_pb2.StartRunRequest(project_id=PROJECT, agent_name="plumbing", input="x")
    for call in (lambda: executor.TriggerRun(request), lambda: _first(executor.StartRun(request))):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await call()
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "visibility internal" in (refused.value.details() or "")
    assert await pool.fetchval("SELECT count(*) FROM kb.agent_runs") == 0


async def test_the_dispatcher_and_other_visibilities_still_start_runs(
    deployment: Deployment,
) -> None:
    definitions = DefinitionRepository(deployment.stack.pool)
    await definitions.upsert(
        PROJECT, AgentDefinition(name="plumbing", system_prompt="p", visibility="internal")
    )
    await definitions.upsert(
        PROJECT, AgentDefinition(name="public", system_prompt="p", visibility="external")
    )
    internal = executor_pb2.StartRunRequest(project_id=PROJECT, agent_name="plumbing", input="x")
    started = await deployment.executor("dispatcher").TriggerRun(internal)
    assert started.agent_name == "plumbing"
    for name in ("helper", "public"):
        run = await deployment.executor("member").TriggerRun(
            executor_pb2.StartRunRequest(project_id=PROJECT, agent_name=name, input="x")
        )
        assert run.agent_name == name


async def _first(stream: grpc.aio.UnaryStreamCall) -> object:  # type: ignore[type-arg]
    async for event in stream:
        return event
    return None
