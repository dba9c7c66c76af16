"""The claim must not cost more as one project's backlog in full graphs grows (review
finding). A member made graphs with max_parallel=1, each with a long backlog of ready
priority-1000 tasks and one task in progress. The one CLAIM statement every dispatcher runs
for every project walked that project's whole backlog each time (nothing in it claimable,
so the walk never reached its LIMIT): 2.8 ms with no such graph, 20.8 ms with one of 9,999
tasks, 297 ms with eight. Now a project's walk reads a bounded number of rows and then
goes graph by graph, passing over each full graph in one probe.

Rows read are counted from EXPLAIN ANALYZE of the claim itself (rolled back): every row the
scans of kb.graph_objects return or remove by filter, times their loops. That count is
deterministic for given data, unlike time."""

from __future__ import annotations

import json
from typing import Any

import asyncpg

from services.dispatcher.models import iso_now
from services.dispatcher.store.claim_sql import CLAIM
from services.dispatcher.store.statistics import refresh_after_write
from tests.security.test_dispatcher_control import P, Q
from tests.security.test_dispatcher_fair_claim import graph

SLOTS = 4


async def fill(pool: asyncpg.Pool, backlog: int) -> str:
    """P's full graph: ``backlog`` ready priority-1000 tasks, one more in progress."""
    full = await graph(pool, P, [1000] * (backlog + 1), max_parallel=1)
    await pool.execute(
        """UPDATE kb.graph_objects SET properties = properties || jsonb_build_object(
             'status', 'in_progress', 'ready', false, 'lease_owner', 'elsewhere',
             'lease_expires', extract(epoch FROM now()) + 86400)
           WHERE id = (SELECT id FROM kb.graph_objects WHERE type = 'SpecTask'
                       AND properties ->> 'graph_id' = $1 LIMIT 1)""",
        full,
    )
    return full


def rows_read(plan: dict[str, Any]) -> int:
    """Rows the plan's scans of kb.graph_objects returned or filtered out."""
    own = 0
    if plan.get("Relation Name") == "graph_objects":
        loops = plan.get("Actual Loops", 1)
        own = round((plan.get("Actual Rows", 0) + plan.get("Rows Removed by Filter", 0)) * loops)
    return own + sum(rows_read(child) for child in plan.get("Plans", []))


async def claim(pool: asyncpg.Pool) -> tuple[int, list[tuple[str, str]]]:
    """The claim's rows read, and what it claimed as (project, key); rolled back."""
    async with pool.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        try:
            explained = await conn.fetchval(
                "EXPLAIN (ANALYZE, FORMAT JSON) " + CLAIM, SLOTS, "d", 30.0, iso_now()
            )
            if isinstance(explained, str):  # json unless a codec decodes it
                explained = json.loads(explained)
            plan = explained[0]["Plan"]
            claimed = await conn.fetch(
                "SELECT project_id, properties ->> 'key' AS key FROM kb.graph_objects "
                "WHERE status = 'in_progress' AND properties ->> 'lease_owner' = 'd'"
            )
        finally:
            await tx.rollback()
    return rows_read(plan), sorted((r["project_id"], r["key"]) for r in claimed)


async def test_rows_a_claim_reads_do_not_grow_with_a_full_graphs_backlog(
    db_pool: asyncpg.Pool,
) -> None:
    await graph(db_pool, Q, [0])
    # P's other work ranks below every task of its full graphs: the claim must reach it.
    await graph(db_pool, P, [0, 0])
    expected = [(P, "t0"), (P, "t1"), (Q, "t0")]

    reads = []
    # Backlogs large enough that the planner reads the tables by index (a table of a few
    # hundred rows is read whole, whatever the claim's SQL).
    for backlog in (1_000, 2_000, 4_000):
        await fill(db_pool, backlog)
        await refresh_after_write(db_pool, 10_000_000)
        await db_pool.execute("ANALYZE kb.graph_objects")
        read, claimed = await claim(db_pool)
        assert claimed == expected, backlog
        reads.append(read)
    # Before: the whole backlog twice (2,024, 6,026, 14,028 rows); now about 80 each time.
    assert max(reads) < 400, reads
    assert reads[-1] - reads[0] < 50, reads
