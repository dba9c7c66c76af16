"""Fair shares across processes (issue 31): two limiters stand for two processes on one
database, each holding only one project's calls, both saturating one declared quota. The
shared budget's per-project virtual times cut the grants 3:1 by the projects' weights;
first come, first served between the processes would give 1:1. No model call: the
limiter alone, its grants from real PostgreSQL."""

from __future__ import annotations

import asyncio

import asyncpg

from agentfleet.llm.limiter.quota import ModelQuotas, QuotaConfig, QuotaScope
from agentfleet.llm.limiter.quota_store import BudgetStore
from agentfleet.settings.quota_settings import parse_model_quotas

RATE_RPM = 1200  # 19 calls a second at the 95% headroom
MEASURED = 80
"""Calls counted once both projects saturate: about 4 s."""
TOLERANCE = 0.08
"""Of the share: the lead a project may have is one grant (5 calls at weight 1 here)."""


async def test_weights_split_a_saturated_budget_between_two_processes(
    db_pool: asyncpg.Pool,
) -> None:
    config = QuotaConfig(
        declared=parse_model_quotas(f"*:rpm={RATE_RPM}"),
        weights={"heavy": 3.0, "light": 1.0},
        grant_s=0.25,
    )
    replicas = {
        project: ModelQuotas(BudgetStore(db_pool, credential="00000000000000bb"), config)
        for project in ("heavy", "light")
    }
    served: list[str] = []
    enough = asyncio.Event()

    async def call(project: str, age: float) -> None:
        slot = await replicas[project].acquire("m", QuotaScope(project=project, age_key=age))
        served.append(project)
        replicas[project].release(slot, tokens=0)
        if len(served) >= 20 + MEASURED:
            enough.set()

    tasks = [
        asyncio.create_task(call(project, float(i)))
        for i in range(150)
        for project in ("heavy", "light")
    ]
    try:
        async with asyncio.timeout(30):
            await enough.wait()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for quotas in replicas.values():
            await quotas.aclose()
    # The first 20 calls settle the virtual times (both start at the clock); then 3:1.
    window = served[20 : 20 + MEASURED]
    heavy = window.count("heavy") / len(window)
    assert abs(heavy - 0.75) <= TOLERANCE, f"heavy got {heavy:.2f} of {len(window)} calls"
    rounds = sum(q.granted_rounds for q in replicas.values())
    # Refusals for the share are round trips too: still fewer than the calls.
    assert rounds < len(served)
