"""Budgets, costs and fallback models against hostile callers (issue 31): only a project's
administrators set its budgets; no project reads another's budget, usage or run costs; limits
that are negative, zero, huge or not a number are refused naming the field, with nothing
stored; fallback model names obey the same rule as the model name. Prices are the operator's
(AGENTFLEET_MODEL_PRICES, tested in tests/unit/test_model_prices.py): no RPC sets them."""

from __future__ import annotations

import math

import grpc
import pytest

from agentfleet.v1 import common_pb2, executor_pb2, history_pb2, history_pb2_grpc, registry_pb2
from tests.security.test_executor_admission import OTHER, PROJECT, Deployment, deployment

__all__ = ["deployment"]


def _set(project: str, **limits: object) -> registry_pb2.SetProjectBudgetRequest:
    return registry_pb2.SetProjectBudgetRequest(
        project_id=project, budget=registry_pb2.ProjectBudget(**limits)
    )


async def _budget_rows(deployment: Deployment) -> list[dict[str, object]]:
    rows = await deployment.stack.pool.fetch("SELECT * FROM kb.project_budgets ORDER BY 1")
    return [dict(row) for row in rows]


async def test_a_member_cannot_set_budgets(deployment: Deployment) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await deployment.registry("member").SetProjectBudget(_set(PROJECT, daily_tokens=10**9))
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert await _budget_rows(deployment) == []
    # A member may read them.
    read = await deployment.registry("member").GetProjectBudget(
        registry_pb2.GetProjectBudgetRequest(project_id=PROJECT)
    )
    assert not read.budget.HasField("daily_tokens")


async def test_another_projects_admin_neither_sets_nor_reads_budgets(
    deployment: Deployment,
) -> None:
    other = deployment.registry("other-admin")
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await other.SetProjectBudget(_set(PROJECT, daily_tokens=1))
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(grpc.aio.AioRpcError) as unread:
        await other.GetProjectBudget(registry_pb2.GetProjectBudgetRequest(project_id=PROJECT))
    assert unread.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert await _budget_rows(deployment) == []


async def test_a_project_sees_neither_anothers_usage_nor_its_run_costs(
    deployment: Deployment,
) -> None:
    await deployment.stack.pool.execute(
        "INSERT INTO kb.project_usage (project_id, period, period_start, tokens, cost_nanos)"
        " VALUES ($1, 'day', (now() AT TIME ZONE 'UTC')::date, 500, 7000)",
        PROJECT,
    )
    run = await deployment.executor("admin").TriggerRun(
        executor_pb2.StartRunRequest(project_id=PROJECT, agent_name="helper", input="go")
    )
    own = await deployment.registry("other-admin").GetProjectBudget(
        registry_pb2.GetProjectBudgetRequest(project_id=OTHER)
    )
    assert own.usage == registry_pb2.ProjectUsage()
    history = history_pb2_grpc.HistoryServiceStub(
        deployment.stack.channel("history", token=deployment.tokens["other-admin"])
    )
    with pytest.raises(grpc.aio.AioRpcError) as hidden:
        await history.GetRun(history_pb2.GetRunRequest(project_id=OTHER, run_id=run.id))
    assert hidden.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as denied:
        await history.GetRunTree(history_pb2.GetRunTreeRequest(project_id=PROJECT, run_id=run.id))
    assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED


@pytest.mark.parametrize(
    ("limits", "field"),
    [
        ({"daily_tokens": -5}, "budget.daily_tokens"),
        ({"daily_tokens": 0}, "budget.daily_tokens"),
        ({"monthly_tokens": 2**62}, "budget.monthly_tokens"),
        ({"daily_cost_nanos": -1}, "budget.daily_cost_nanos"),
        ({"monthly_cost_nanos": 2**63 - 1}, "budget.monthly_cost_nanos"),
        ({"daily_tokens": 10, "warn_fraction": math.nan}, "budget.warn_fraction"),
        ({"daily_tokens": 10, "warn_fraction": math.inf}, "budget.warn_fraction"),
        ({"daily_tokens": 10, "warn_fraction": 1.5}, "budget.warn_fraction"),
        ({"daily_tokens": 10, "warn_fraction": 0.0}, "budget.warn_fraction"),
    ],
)
async def test_hostile_limits_are_refused_naming_the_field(
    deployment: Deployment, limits: dict[str, object], field: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await deployment.registry("admin").SetProjectBudget(_set(PROJECT, **limits))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in (refused.value.details() or "")
    assert await _budget_rows(deployment) == []


@pytest.mark.parametrize(
    ("fallbacks", "field"),
    [
        (["projects/other/locations/us-central1/endpoints/1"], "fallback_models"),
        (["a", "b", "c", "d"], "fallback_models"),
        (["gemini-2.5-flash", "gemini-2.5-flash"], "fallback_models"),
        (["x" * 201], "fallback_models"),
    ],
)
async def test_hostile_fallback_models_are_refused_naming_the_field(
    deployment: Deployment, fallbacks: list[str], field: str
) -> None:
    definition = common_pb2.AgentDefinition(
        name="spender",
        system_prompt="x",
        model=common_pb2.ModelConfig(name="gemini-2.5-pro", fallback_models=fallbacks),
    )
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await deployment.registry("admin").UpsertAgentDefinition(
            registry_pb2.UpsertAgentDefinitionRequest(
                project_id=PROJECT, agent_definition=definition
            )
        )
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"agent_definition.model.{field}" in (refused.value.details() or "")


@pytest.mark.parametrize("wait", [float("nan"), -1.0, float("inf"), 86_401.0])
async def test_a_hostile_fallback_wait_is_refused_naming_the_field(
    deployment: Deployment, wait: float
) -> None:
    # A float on the wire: NaN passes JSON Schema's bounds, inf would mean wait for ever.
    definition = common_pb2.AgentDefinition(
        name="spender",
        system_prompt="x",
        model=common_pb2.ModelConfig(
            name="gemini-2.5-pro", fallback_models=["gemini-2.5-flash"], fallback_wait_s=wait
        ),
    )
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await deployment.registry("admin").UpsertAgentDefinition(
            registry_pb2.UpsertAgentDefinitionRequest(
                project_id=PROJECT, agent_definition=definition
            )
        )
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "agent_definition.model.fallback_wait_s" in (refused.value.details() or "")


async def test_a_fallback_wait_is_stored_and_read_back(deployment: Deployment) -> None:
    registry = deployment.registry("admin")
    definition = common_pb2.AgentDefinition(
        name="waiter",
        system_prompt="x",
        model=common_pb2.ModelConfig(
            name="gemini-2.5-pro", fallback_models=["gemini-2.5-flash"], fallback_wait_s=12.5
        ),
    )
    await registry.UpsertAgentDefinition(
        registry_pb2.UpsertAgentDefinitionRequest(project_id=PROJECT, agent_definition=definition)
    )
    read = await registry.GetAgentDefinition(
        registry_pb2.GetAgentDefinitionRequest(project_id=PROJECT, name="waiter")
    )
    assert read.agent_definition.model.fallback_wait_s == 12.5
    assert read.agent_definition.model.HasField("fallback_wait_s")


@pytest.mark.parametrize("value", [0, -1, 10**18])
async def test_a_hostile_tree_cost_limit_is_refused_naming_the_field(
    deployment: Deployment, value: int
) -> None:
    before = await deployment.stack.pool.fetchval("SELECT count(*) FROM kb.agent_runs")
    request = executor_pb2.StartRunRequest(
        project_id=PROJECT, agent_name="helper", input="go", max_tree_cost_nanos=value
    )
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await deployment.executor("member").TriggerRun(request)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "max_tree_cost_nanos" in (refused.value.details() or "")
    assert await deployment.stack.pool.fetchval("SELECT count(*) FROM kb.agent_runs") == before
