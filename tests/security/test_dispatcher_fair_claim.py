"""One project's tasks must not starve another project's task graphs (review finding): the
dispatcher's claim took the top ``slots`` available SpecTasks of all projects by priority,
then age, so a member (CreateTaskGraph is enough) could

- ``limited``: make one graph with max_parallel=1 and 50 tasks of priority 1000. Every
  claim's top candidates were that graph's tasks, its limit admitted none while one ran,
  so the claim took nothing and another project's older task waited with 3 of 4 slots free;
- ``priority``: fill every slot with priority-1000 tasks whose runs take long, ahead of
  every other project's older tasks, and keep them filled from a backlog.

Now the claim goes round robin across projects, a project's turns counted after the tasks it
already has in progress, priority orders tasks within a project only, and a graph at its
limit holds back nothing. The runs stand-in (:class:`RunningRuns`) keeps each triggered run
running, as a slow agent does, so the slots stay taken.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
import pytest

from agentfleet.testing.dispatch import RunningRuns
from agentfleet.testing.waiting import wait_for_query
from services.dispatcher.graphs.dag import NewTask
from services.dispatcher.graphs.graph_writes import GraphStore
from services.dispatcher.loop import Dispatcher
from services.dispatcher.selector import Selector
from services.dispatcher.store import claims
from services.dispatcher.timing import LoopTiming
from tests.security.test_dispatcher_control import P, Q, define

SLOTS = 4
IN_PROGRESS = """SELECT count(*) FROM kb.graph_objects
                 WHERE project_id = $1 AND type = 'SpecTask' AND status = 'in_progress'"""


async def graph(
    pool: asyncpg.Pool, project: str, priorities: list[int], *, max_parallel: int = 0
) -> str:
    """A graph of independent tasks (keys t0, t1, ...) of the given priorities; its id."""
    return await GraphStore(pool).create_graph(
        project,
        title=f"{project}-graph",
        tasks=[NewTask(key=f"t{i}", title="t", priority=p) for i, p in enumerate(priorities)],
        edges=[],
        max_parallel=max_parallel,
        labels={},
        request_id="",
        validate_only=False,
    )


async def pending(pool: asyncpg.Pool, graph_id: str) -> int:
    return await pool.fetchval(
        "SELECT count(*) FROM kb.graph_objects WHERE type = 'SpecTask' AND status = 'pending' "
        "AND properties ->> 'graph_id' = $1",
        graph_id,
    )


@asynccontextmanager
async def dispatching(
    pool: asyncpg.Pool, database_url: str, runs: RunningRuns
) -> AsyncIterator[None]:
    for project in (P, Q):
        await define(pool, project, "worker", is_default=True)
    dispatcher = Dispatcher(
        pool,
        dsn=database_url,
        runs=runs,
        selector=Selector(pool),
        slots=SLOTS,
        timing=LoopTiming(poll_s=0.1),
    )
    stopping = asyncio.Event()
    loop = asyncio.create_task(dispatcher.run(stopping))
    try:
        yield
    finally:
        stopping.set()
        await loop


@pytest.mark.parametrize("attack", ["limited", "priority"])
async def test_one_projects_tasks_do_not_starve_another_projects_graph(
    db_pool: asyncpg.Pool, database_url: str, attack: str
) -> None:
    # The victim's graph exists first: its task is the oldest work in the system.
    await graph(db_pool, Q, [0])
    if attack == "limited":
        await graph(db_pool, P, [1000] * 50, max_parallel=1)
    else:
        await graph(db_pool, P, [1000] * SLOTS)

    async with dispatching(db_pool, database_url, RunningRuns(db_pool)):
        await wait_for_query(db_pool, f"SELECT ({IN_PROGRESS}) > 0", Q, timeout_s=10, what=Q)
        expected = 1 if attack == "limited" else SLOTS - 1
        await wait_for_query(db_pool, f"SELECT ({IN_PROGRESS}) = {expected}", P, what=P)


async def test_a_slot_freed_by_a_project_holding_them_all_goes_to_the_waiting_project(
    db_pool: asyncpg.Pool, database_url: str
) -> None:
    """P holds every slot and has a backlog of priority-1000 tasks older than Q's task:
    the slot P's finished run frees goes to Q, not to P's backlog."""
    flood = await graph(db_pool, P, [1000] * (SLOTS + 3))
    runs = RunningRuns(db_pool)
    async with dispatching(db_pool, database_url, runs):
        await wait_for_query(
            db_pool,
            f"SELECT count(*) = {SLOTS} FROM kb.agent_runs WHERE project_id = $1 "
            "AND status = 'running'",
            P,
            what="P's runs in every slot",
        )
        await graph(db_pool, Q, [0])
        first = await db_pool.fetchval(
            "SELECT id::text FROM kb.graph_objects WHERE type = 'SpecTask' "
            "AND status = 'in_progress' AND properties ->> 'graph_id' = $1 LIMIT 1",
            flood,
        )

        await runs.finish(first)

        await wait_for_query(db_pool, f"SELECT ({IN_PROGRESS}) > 0", Q, what="Q's task started")
        assert await db_pool.fetchval(IN_PROGRESS, P) == SLOTS - 1
        assert await pending(db_pool, flood) == 3


async def test_claim_turns_go_round_projects_by_priority_and_skip_full_graphs(
    db_pool: asyncpg.Pool,
) -> None:
    """The claim statement itself, batch by batch: each project's first turn (the oldest
    first), then its second, ...; priority orders a project's own tasks; P's graph at its
    max_parallel does not hold back P's other graph."""
    q = await graph(db_pool, Q, [0, 0])
    limited = await graph(db_pool, P, [1000] * 5, max_parallel=1)
    other = await graph(db_pool, P, [3, 7])

    async def claim(limit: int) -> list[str]:
        """The batch as sorted graph names, with the key where priority decides it."""
        async with db_pool.acquire() as conn:
            batch = await claims.claim_available(conn, owner="d", lease_s=30.0, limit=limit)
        names = []
        for c in batch:
            graph_id = c.task.properties["graph_id"]
            key = c.task.properties["key"]
            names.append({q: "q", limited: "limited", other: f"other {key}"}[graph_id])
        return sorted(names)

    # Tasks of one graph are created together: their age ties, so any of them may go first.
    # Turn 1 of each project: Q's task and P's highest priority (the limited graph's).
    assert await claim(2) == ["limited", "q"]
    # Turn 2: the limited graph is full, so P offers its other graph's best; Q its next.
    assert await claim(2) == ["other t1", "q"]
    assert await claim(SLOTS) == ["other t0"]
    assert await claim(SLOTS) == []
    assert await pending(db_pool, limited) == 4
