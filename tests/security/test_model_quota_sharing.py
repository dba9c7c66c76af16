"""Hostile parties against the shared model limiter: a model server whose 429 asks for a
retry delay of years, and a project flooding the queue to starve the others."""

from __future__ import annotations

import asyncio

import asyncpg

from agentfleet.llm.quota import ModelQuotas, QuotaConfig, QuotaScope
from agentfleet.llm.quota_math import MAX_BLOCK_S, BudgetState, throttled
from agentfleet.llm.quota_store import BudgetStore
from agentfleet.quota_settings import ModelLimits, parse_model_quotas


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
