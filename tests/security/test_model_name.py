"""A tenant's model name is a model id, never a resource path (``$defs/model_name`` of the
manifest schema). google-genai sends a name with a slash as the request's resource path
(``projects/...``, ``publishers/...``, ``tunedModels/...``) with the platform's credentials,
so a name could choose another project's endpoint or model. Refused when written; a row
planted before the rule fails its run with nothing sent to the model."""

from __future__ import annotations

import grpc
import pytest

from agentfleet.v1 import common_pb2, executor_pb2, registry_pb2
from tests.security.test_executor_admission import PROJECT, Deployment, deployment

__all__ = ["deployment"]

RESOURCE_PATHS = [
    "projects/other/locations/us-central1/endpoints/123",
    "publishers/someone/models/theirs",
    "tunedModels/another-tenants-model",
    "models/%2e%2e/%2e%2e/v1beta/files",
    "gemini-2.5-flash:generateContent?alt=sse",
]


@pytest.mark.parametrize("name", RESOURCE_PATHS)
async def test_a_model_name_that_is_a_path_is_refused(deployment: Deployment, name: str) -> None:
    pool = deployment.stack.pool
    before = await pool.fetchval("SELECT count(*) FROM kb.agent_definitions")
    definition = common_pb2.AgentDefinition(
        name="elsewhere", system_prompt="x", model=common_pb2.ModelConfig(name=name)
    )
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await deployment.registry("admin").UpsertAgentDefinition(
            registry_pb2.UpsertAgentDefinitionRequest(
                project_id=PROJECT, agent_definition=definition
            )
        )
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "agent_definition.model.name" in (refused.value.details() or "")
    assert await pool.fetchval("SELECT count(*) FROM kb.agent_definitions") == before


async def test_model_ids_are_accepted(deployment: Deployment) -> None:
    for name in ("gemini-2.5-flash", "models/gemini-2.0-flash-001", "gemini-exp-1206"):
        definition = common_pb2.AgentDefinition(
            name="plain", system_prompt="x", model=common_pb2.ModelConfig(name=name)
        )
        stored = await deployment.registry("admin").UpsertAgentDefinition(
            registry_pb2.UpsertAgentDefinitionRequest(
                project_id=PROJECT, agent_definition=definition
            )
        )
        assert stored.agent_definition.model.name == name


async def test_a_planted_path_fails_the_run_and_sends_nothing(deployment: Deployment) -> None:
    pool = deployment.stack.pool
    await pool.execute(
        "INSERT INTO kb.agent_definitions (project_id, name, system_prompt, model)"
        " VALUES ($1, 'planted', 'planted', $2::jsonb)",
        PROJECT,
        {"provider": "google", "name": RESOURCE_PATHS[0]},
    )
    request = executor_pb2.StartRunRequest(project_id=PROJECT, agent_name="planted", input="go")
    events = [e async for e in deployment.executor("member").StartRun(request, timeout=30)]
    final = events[-1].run_finished.run
    assert final.status == common_pb2.RUN_STATUS_FAILED
    assert "model.name" in final.error_message
    assert deployment.stub.requests == []
