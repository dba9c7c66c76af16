"""Issue 8: two transactions completing the last two blockers of a task at the same moment
must not leave it waiting forever.

Under READ COMMITTED each completing statement's snapshot still sees the other blocker
unfinished, so neither readies the dependent in that statement; the completing side asks for
a re-check (``dependents.unblock``) that runs after its commit and sees both completions.
The race is reproduced deterministically: both completing statements run, in explicit
transactions on two connections, before either commits.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest_asyncio

from agentfleet.postgres import db
from agentfleet.testing.dispatch import InstantRuns
from services.dispatcher.graphs.dag import NewTask
from services.dispatcher.graphs.graph_writes import GraphStore
from services.dispatcher.loop import Dispatcher
from services.dispatcher.selector import Selector
from services.dispatcher.store import claims, dependents, transitions
from services.dispatcher.store.common import CHANGES_CHANNEL
from services.dispatcher.store.transitions import Attempt
from services.dispatcher.timing import LoopTiming
from services.executor.registry.definitions import AgentDefinition, DefinitionRepository
from services.executor.registry.model_config import ModelConfig

PROJECT = "unblock-race"


@pytest_asyncio.fixture
async def pool(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    pool = await db.create_pool(database_url, min_size=2, max_size=4)
    yield pool
    await pool.close()


async def _fan_in(pool: asyncpg.Pool) -> str:
    """A and B both block D; returns the graph id."""
    return await GraphStore(pool).create_graph(
        PROJECT,
        title="fan-in",
        tasks=[NewTask(key=k, title=k) for k in ("a", "b", "d")],
        edges=[("a", "d"), ("b", "d")],
        max_parallel=0,
        labels={},
        request_id="",
        validate_only=False,
    )


async def _claim_blockers(pool: asyncpg.Pool) -> dict[str, Attempt]:
    async with pool.acquire() as conn:
        claimed = await claims.claim_available(conn, owner="race", lease_s=60.0, limit=8)
    attempts = {
        str(c.task.properties["key"]): Attempt(
            project_id=c.task.project_id,
            task_id=c.task.id,
            graph_id=str(c.task.properties["graph_id"]),
            session_id=c.session_id,
            run_id=str(uuid.uuid4()),
        )
        for c in claimed
    }
    assert sorted(attempts) == ["a", "b"]
    return attempts


async def _dependent(pool: asyncpg.Pool, graph_id: str) -> asyncpg.Record:
    row = await pool.fetchrow(
        "SELECT id::text AS id, status, (properties ->> 'ready') = 'true' AS ready "
        "FROM kb.graph_objects WHERE project_id = $1 AND type = 'SpecTask' "
        "AND properties ->> 'graph_id' = $2 AND properties ->> 'key' = 'd'",
        PROJECT,
        graph_id,
    )
    assert row is not None
    return row


async def _complete_both_before_either_commits(
    pool: asyncpg.Pool, attempts: dict[str, Attempt]
) -> list[transitions.Completion]:
    async with pool.acquire() as first, pool.acquire() as second:
        tx_a, tx_b = first.transaction(), second.transaction()
        await tx_a.start()
        await tx_b.start()
        try:
            done_a = await transitions.complete(first, attempts["a"], summary="a done")
            done_b = await transitions.complete(second, attempts["b"], summary="b done")
        except BaseException:
            await tx_a.rollback()
            await tx_b.rollback()
            raise
        await tx_a.commit()
        await tx_b.commit()
    return [done_a, done_b]


async def test_concurrent_completions_of_the_last_blockers_ready_the_dependent(
    pool: asyncpg.Pool,
) -> None:
    graph_id = await _fan_in(pool)
    attempts = await _claim_blockers(pool)

    completions = await _complete_both_before_either_commits(pool, attempts)

    # The race happened: both blockers completed, yet neither statement readied D...
    assert all(c.done for c in completions)
    statuses = await pool.fetch(
        "SELECT status FROM kb.graph_objects WHERE project_id = $1 AND id = ANY($2::uuid[])",
        PROJECT,
        [uuid.UUID(a.task_id) for a in attempts.values()],
    )
    assert [r["status"] for r in statuses] == ["completed", "completed"]
    dependent = await _dependent(pool, graph_id)
    assert (dependent["status"], dependent["ready"]) == ("pending", False)
    # ...but each one saw D left waiting and asks for the re-check after its commit.
    assert all(c.recheck for c in completions)

    # The re-check each side runs after its own commit readies D once, and D is claimable.
    for attempt in attempts.values():
        await dependents.unblock(pool, [(attempt.project_id, attempt.task_id)])
    dependent = await _dependent(pool, graph_id)
    assert (dependent["status"], dependent["ready"]) == ("pending", True)
    async with pool.acquire() as conn:
        claimed = await claims.claim_available(conn, owner="race", lease_s=60.0, limit=8)
    assert [c.task.id for c in claimed] == [dependent["id"]]


async def test_a_completion_that_readies_every_dependent_asks_no_recheck(
    pool: asyncpg.Pool,
) -> None:
    graph_id = await _fan_in(pool)
    attempts = await _claim_blockers(pool)

    async with pool.acquire() as conn:
        first = await transitions.complete(conn, attempts["a"], summary="a done")
        last = await transitions.complete(conn, attempts["b"], summary="b done")

    # A alone leaves D waiting on B (a re-check is asked, and finds nothing to do yet);
    # B, completed last in its own snapshot, readies D itself: no extra statement.
    assert (first.done, first.recheck) == (True, True)
    assert (last.done, last.recheck) == (True, False)
    dependent = await _dependent(pool, graph_id)
    assert (dependent["status"], dependent["ready"]) == ("pending", True)
    assert await dependents.unblock(pool, [(PROJECT, attempts["a"].task_id)]) == 0


async def test_the_dispatcher_sweep_readies_a_dependent_whose_recheck_never_ran(
    pool: asyncpg.Pool, database_url: str
) -> None:
    # The raced state as a dispatcher that died between its commit and its re-check leaves
    # it: both blockers completed, D pending and not ready, nobody left to re-check it.
    graph_id = await _fan_in(pool)
    await _complete_both_before_either_commits(pool, await _claim_blockers(pool))
    assert (await _dependent(pool, graph_id))["ready"] is False
    await DefinitionRepository(pool).upsert(
        PROJECT,
        AgentDefinition(name="w", system_prompt="w", model=ModelConfig(name="m"), is_default=True),
    )

    dispatcher = Dispatcher(
        pool,
        dsn=database_url,
        runs=InstantRuns(pool),
        selector=Selector(pool),
        timing=LoopTiming(lease_s=30.0, poll_s=0.2),
    )
    stopping = asyncio.Event()
    loop = asyncio.create_task(dispatcher.run(stopping))
    try:
        await _wait_completed(pool, database_url, graph_id)
    finally:
        stopping.set()
        await loop


async def _wait_completed(pool: asyncpg.Pool, url: str, graph_id: str) -> None:
    """Until D is completed: re-read at each task change NOTIFY (and every second), 30 s."""
    changed = asyncio.Event()
    listener = await db.connect(url)
    await listener.add_listener(CHANGES_CHANNEL, lambda *_: changed.set())
    try:
        async with asyncio.timeout(30):
            while (await _dependent(pool, graph_id))["status"] != "completed":
                changed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), timeout=1.0)
    finally:
        await listener.close()


async def test_the_sweep_walks_the_pending_index(pool: asyncpg.Pool) -> None:
    # Many finished and pending tasks, analysed: a page is an index range, not a scan.
    await pool.execute(
        """
        INSERT INTO kb.graph_objects (project_id, type, properties)
        SELECT $1, 'SpecTask', jsonb_build_object(
                   'key', 't' || i, 'graph_id', $2::text,
                   'status', CASE WHEN i % 3 = 0 THEN 'pending' ELSE 'completed' END,
                   'ready', false)
        FROM generate_series(1, 30000) AS i
        """,
        PROJECT,
        str(uuid.uuid4()),
    )
    await pool.execute("ANALYZE kb.graph_objects")
    cursor = dependents.SweepCursor()
    plan = "\n".join(
        row[0]
        for row in await pool.fetch(
            f"EXPLAIN {dependents._SWEEP}",
            cursor.project_id,
            cursor.created_at,
            cursor.task_id,
            200,
        )
    )
    assert "graph_objects_pending_spectasks_idx" in plan, plan
    assert "Seq Scan on graph_objects" not in plan, plan
    # Pages of 200 walk all 10,000 pending tasks (none has a blocker: all become ready),
    # then the cursor starts over.
    pages, readied = 0, 0
    while True:
        found, cursor = await dependents.sweep(pool, cursor, limit=200)
        pages, readied = pages + 1, readied + found
        if cursor == dependents.SweepCursor():
            break
    assert (pages, readied) == (51, 10_000)
    found, _ = await dependents.sweep(pool, cursor, limit=200)
    assert found == 0  # the second pass finds them ready


async def test_the_recheck_probes_unique_indexes(pool: asyncpg.Pool) -> None:
    # A big project, analysed: the re-check must not scan its edges or its pending tasks.
    await pool.execute(
        """
        INSERT INTO kb.graph_objects (project_id, type, properties)
        SELECT $1, 'SpecTask', jsonb_build_object('key', 't' || i, 'status',
                   CASE WHEN i % 2 = 0 THEN 'pending' ELSE 'completed' END)
        FROM generate_series(1, 20000) AS i
        """,
        PROJECT,
    )
    await pool.execute(
        """
        INSERT INTO kb.graph_relationships (project_id, type, src_id, dst_id)
        SELECT $1, 'blocks', a.id, b.id
        FROM (SELECT id, row_number() OVER (ORDER BY id) AS n FROM kb.graph_objects) a
        JOIN (SELECT id, row_number() OVER (ORDER BY id) AS n FROM kb.graph_objects) b
          ON b.n = a.n + 1
        """,
        PROJECT,
    )
    await pool.execute("ANALYZE kb.graph_objects; ANALYZE kb.graph_relationships")
    ids = [r["id"] for r in await pool.fetch("SELECT id FROM kb.graph_objects LIMIT 20")]
    plan = "\n".join(
        row[0] for row in await pool.fetch(f"EXPLAIN {dependents._UNBLOCK}", [PROJECT] * 20, ids)
    )
    assert "graph_relationships_src_uidx" in plan, plan
    assert "graph_objects_pkey" in plan, plan
    for scan in ("Seq Scan", "type_status_idx", "spectask_graph_idx", "pending_spectasks_idx"):
        assert scan not in plan, plan
