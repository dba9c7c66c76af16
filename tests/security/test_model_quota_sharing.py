"""Hostile parties against the shared model limiter: a model server whose 429 asks for a
retry delay of years, a project flooding the queue to starve the others, and a tenant's
fallback wait that is not a number of seconds."""

from __future__ import annotations

import asyncio
import math

import asyncpg
import pytest

from agentfleet.llm.limiter.quota import ModelQuotas, QuotaConfig, QuotaScope
from agentfleet.llm.limiter.quota_math import MAX_BLOCK_S, BudgetState, throttled
from agentfleet.llm.limiter.quota_store import BudgetStore
from agentfleet.settings.quota_settings import ModelLimits, parse_model_quotas
from services.executor.registry.definitions import AgentDefinition
from services.executor.registry.manifest import definition_violations
from services.executor.registry.model_config import ModelConfig


def test_a_model_server_cannot_block_the_fleet_for_longer_than_the_cap() -> None:
    state = throttled(BudgetState(), ModelLimits(), retry_after_s=3e9, now=1000.0)
    assert state.blocked_until == 1000.0 + MAX_BLOCK_S


async def test_a_flooding_project_does_not_starve_another_project_s_calls(
    db_pool: asyncpg.Pool,
) -> None:
    # No model call at all: the limiter alone, its slots granted from the real database.
    quotas = ModelQuotas(
        BudgetStore(db_pool, credential="00000000000000aa"),
        QuotaConfig(declared=parse_model_quotas("*:rpm=1200"), grant_s=0.25),  # 19/s
    )
    served: list[str] = []

    async def call(project: str, age: float) -> None:
        slot = await quotas.acquire("m", QuotaScope(project=project, age_key=age))
        served.append(project)
        quotas.release(slot, tokens=0)

    try:
        # The flood claims to be the oldest runs: the age orders a project's own calls only.
        flood = [asyncio.create_task(call("hostile", -1e12)) for _ in range(200)]
        await asyncio.sleep(0)
        victim = [asyncio.create_task(call("victim", 1e12 + i)) for i in range(3)]
        await asyncio.wait_for(asyncio.gather(*victim), timeout=30)
        victim_done_at = len(served)
        for task in flood:
            task.cancel()
        await asyncio.gather(*flood, return_exceptions=True)
    finally:
        await quotas.aclose()
    # Three calls of the victim, served alternately with the flood's: within ~6 slots.
    assert victim_done_at <= 3 * 2 + 2


@pytest.mark.parametrize("wait", [math.nan, -1.0, math.inf, 86_401.0, 1e300])
def test_a_tenant_s_fallback_wait_must_be_a_sane_number_of_seconds(wait: float) -> None:
    # NaN passes JSON Schema's minimum and maximum (every comparison is false); inf and huge
    # values would make a tenant's call wait for ever before its fallback.
    definition = AgentDefinition(
        name="a",
        model=ModelConfig(name="gemini-2.5-pro", fallback_models=("x",), fallback_wait_s=wait),
    )
    fields = [v.field for v in definition_violations(definition)]
    assert "agent_definition.model.fallback_wait_s" in fields
