"""Issue 15, "a malformed row can hurt only its own task": SpecTasks planted straight in the
database (around every writer) with a bad graph_id, a graph of another project, a bad
max_retries or timeout, a JSON-object priority, or no max_retries at all, against the real
dispatch loop (with the InstantRuns stand-in for the executor)."""

from __future__ import annotations

import asyncio
from itertools import pairwise
from typing import Any

import asyncpg

from agentfleet.graph import TASK_GRAPH, GraphRepository
from agentfleet.testing.dispatch import InstantRuns
from agentfleet.testing.waiting import wait_for_query
from services.dispatcher.graphs.dag import NewTask
from services.dispatcher.graphs.graph_writes import GraphStore
from services.dispatcher.loop import Dispatcher
from services.dispatcher.runs import TriggerRefused
from services.dispatcher.selector import Selector
from services.dispatcher.store.transitions import RetryBackoff
from services.dispatcher.timing import LoopTiming
from tests.security.test_dispatcher_control import P, Q, define


async def plant_task(pool: asyncpg.Pool, project: str, **properties: Any) -> str:
    """A SpecTask written around every writer (straight SQL), ready to be claimed."""
    values = {"status": "pending", "ready": True, "title": "planted", **properties}
    return await pool.fetchval(
        "INSERT INTO kb.graph_objects (project_id, type, properties) "
        "VALUES ($1, 'SpecTask', $2::jsonb) RETURNING id::text",
        project,
        values,
    )


async def run_dispatcher(pool: asyncpg.Pool, dsn: str, runs: Any, **kwargs: Any) -> Any:
    dispatcher = Dispatcher(pool, dsn=dsn, runs=runs, selector=Selector(pool), **kwargs)
    stopping = asyncio.Event()
    return dispatcher, stopping, asyncio.create_task(dispatcher.run(stopping))


async def test_malformed_tasks_fail_alone_and_other_projects_dispatch(
    db_pool: asyncpg.Pool, database_url: str
) -> None:
    for project in (P, Q):
        await define(db_pool, project, "worker", is_default=True)
    store = GraphStore(db_pool)
    mine = await store.create_graph(
        P,
        title="x",
        tasks=[NewTask(key="ok", title="ok")],
        edges=[],
        max_parallel=0,
        labels={},
        request_id="",
        validate_only=False,
    )
    theirs = await store.create_graph(
        Q,
        title="y",
        tasks=[NewTask(key=f"t{i}", title="t") for i in range(3)],
        edges=[],
        max_parallel=0,
        labels={},
        request_id="",
        validate_only=False,
    )
    bad = {
        "graph_id": await plant_task(db_pool, P, graph_id="not-a-uuid", priority=1000),
        "of this project": await plant_task(db_pool, P, graph_id=theirs, priority=1000),
        "max_retries": await plant_task(db_pool, P, graph_id=mine, max_retries="lots"),
        "timeout_s": await plant_task(db_pool, P, graph_id=mine, timeout_s={"s": 1}),
    }
    # A JSON-object priority sorts above every number in jsonb: it must count as 0.
    first = await plant_task(db_pool, P, graph_id=mine, key="first", priority=5)
    older = await plant_task(db_pool, P, graph_id=mine, key="older", priority=0)
    sneaky = await plant_task(db_pool, P, graph_id=mine, key="sneaky", priority={"a": 1})

    _, stopping, loop = await run_dispatcher(
        db_pool, database_url, InstantRuns(db_pool), slots=1, timing=LoopTiming(poll_s=0.1)
    )
    try:
        await wait_for_query(
            db_pool,
            "SELECT count(*) = 3 FROM kb.graph_objects WHERE project_id = $1 "
            "AND type = 'SpecTask' AND status = 'completed'",
            Q,
        )
        await wait_for_query(
            db_pool,
            "SELECT count(*) = 0 FROM kb.graph_objects WHERE project_id = $1 "
            "AND type = 'SpecTask' AND status IN ('pending', 'in_progress')",
            P,
        )
    finally:
        stopping.set()
        await loop
    for what, task_id in bad.items():
        row = await db_pool.fetchrow(
            "SELECT status, properties ->> 'error_message' AS error FROM kb.graph_objects "
            "WHERE id = $1::uuid",
            task_id,
        )
        assert row["status"] == "failed", what
        assert what in row["error"], row["error"]
    assert (
        await db_pool.fetchval(
            "SELECT count(*) FROM kb.agent_runs WHERE task_id = ANY($1::uuid[])", list(bad.values())
        )
        == 0
    )
    started = await db_pool.fetch(
        "SELECT id::text, properties FROM kb.graph_objects WHERE id = ANY($1::uuid[]) "
        "ORDER BY properties ->> 'start_time'",
        [first, older, sneaky],
    )
    assert [r["id"] for r in started] == [first, older, sneaky]
    assert all(r["properties"]["status"] == "completed" for r in started)
    assert started[2]["properties"]["priority"] == 0
    assert started[2]["properties"]["malformed_priority"] == {"a": 1}


class RefusingRuns(InstantRuns):
    """The executor refusing every run of the task (each attempt fails at once)."""

    async def trigger(self, run: Any) -> str:
        self.triggered += 1
        raise TriggerRefused("refused")


async def test_a_task_without_max_retries_stops_after_the_default_with_backoff(
    db_pool: asyncpg.Pool, database_url: str
) -> None:
    await define(db_pool, P, "worker", is_default=True)
    graph = await GraphRepository(db_pool).create_object(
        P, type=TASK_GRAPH, properties={"status": "active"}
    )
    task = await plant_task(db_pool, P, graph_id=graph.id, key="flaky")
    runs = RefusingRuns(db_pool)
    _, stopping, loop = await run_dispatcher(
        db_pool,
        database_url,
        runs,
        timing=LoopTiming(poll_s=0.05, retry_backoff=RetryBackoff(base_s=0.3, max_s=0.6)),
    )
    try:
        await wait_for_query(
            db_pool, "SELECT status = 'failed' FROM kb.graph_objects WHERE id = $1::uuid", task
        )
    finally:
        stopping.set()
        await loop
    sessions = await db_pool.fetch(
        "SELECT created_at FROM kb.graph_objects WHERE type = 'Session' "
        "AND properties ->> 'task_id' = $1 ORDER BY created_at",
        task,
    )
    # 1 attempt + the default 2 retries, then failed for good; each retry waited its backoff
    # although the loop polled every 50 ms.
    assert runs.triggered == len(sessions) == 3
    gaps = [(b["created_at"] - a["created_at"]).total_seconds() for a, b in pairwise(sessions)]
    assert gaps[0] >= 0.3, gaps
    assert gaps[1] >= 0.6, gaps
    stored = await db_pool.fetchval(
        "SELECT properties FROM kb.graph_objects WHERE id = $1::uuid", task
    )
    assert stored["retry_count"] == 2
