"""ListTaskGraphs in a project of many graphs of which few match the filter: the pages (real
gRPC, the dispatcher in-process, real PostgreSQL) hold exactly the matching graphs newest
first, with tokens that carry on; and a page reads rows of the page, not of the project
(EXPLAIN ANALYZE of every statement the listing runs: a project twice as big reads the same).
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

import asyncpg
import grpc
import pytest

from agentfleet.postgres import db
from agentfleet.postgres.pagination import encode_page_token
from agentfleet.testing.services import start_stack
from agentfleet.v1 import dispatcher_pb2 as pb
from agentfleet.v1 import dispatcher_pb2_grpc
from services.dispatcher.graphs.dag import NewTask
from services.dispatcher.graphs.graph_writes import GraphStore
from services.dispatcher.server import DispatcherServicer

PROJECT = "many-graphs"
GRAPHS = 200
# Graph (by creation order) -> the state its two tasks a -> b are put in; the rest completed.
FAILED = {7, 61, 122, 188, 199}
PAUSED = {30, 140}
ACTIVE = {5, 100}
CANCELLED = {45, 150}
S = pb.TaskGraphStatus


async def fill(pool: asyncpg.Pool, count: int, *, mixed: bool = True) -> list[str]:
    """``count`` new graphs of two tasks (a blocks b), oldest first, in the states above
    (``mixed``) or all completed; none that a dispatcher would claim (b stays pending only
    behind an unfinished a; an active graph's a is in progress under another dispatcher's
    live lease)."""
    store = GraphStore(pool)
    ids = [
        await store.create_graph(
            PROJECT,
            title=f"g{i}",
            tasks=[NewTask(key="a", title="a"), NewTask(key="b", title="b")],
            edges=[("a", "b")],
            max_parallel=0,
            labels={},
            request_id="",
            validate_only=False,
        )
        for i in range(count)
    ]
    states = {"failed": FAILED, "paused": PAUSED, "in_progress": ACTIVE} if mixed else {}
    unfinished = {i for group in states.values() for i in group if i < count}
    await _set(pool, [ids[i] for i in range(count) if i not in unfinished], "completed", "a", "b")
    for status, group in states.items():
        await _set(pool, [ids[i] for i in sorted(group) if i < count], status, "a")
    return [str(i) for i in ids]


async def _set(pool: asyncpg.Pool, graph_ids: Sequence[Any], status: str, *keys: str) -> None:
    await pool.execute(
        """
        UPDATE kb.graph_objects
        SET properties = properties || jsonb_build_object('status', $2::text)
              || CASE WHEN $2 = 'in_progress' THEN jsonb_build_object('lease_owner', 'elsewhere',
                          'lease_expires', extract(epoch FROM now()) + 3600)
                      ELSE '{}'::jsonb END,
            version = version + 1, updated_at = now()
        WHERE project_id = $3 AND type = 'SpecTask'
          AND properties ->> 'graph_id' = ANY($1::text[]) AND properties ->> 'key' = ANY($4)
        """,
        [str(g) for g in graph_ids],
        status,
        PROJECT,
        list(keys),
    )


def newest_first(ids: Sequence[str], *groups: set[int]) -> list[str]:
    return [ids[i] for i in sorted(set().union(*groups), reverse=True)]


def chunks(ids: list[str], size: int) -> list[list[str]]:
    return [ids[i : i + size] for i in range(0, len(ids), size)] or [[]]


async def test_few_matching_graphs_page_in_order_with_tokens(
    database_url: str, db_pool: asyncpg.Pool
) -> None:
    ids = await fill(db_pool, GRAPHS)
    stack = await start_stack(database_url=database_url, pool=db_pool, names=("dispatcher",))
    try:
        token = await stack.create_token(PROJECT)
        api = dispatcher_pb2_grpc.DispatcherServiceStub(stack.channel("dispatcher", token=token))
        for i in CANCELLED:
            await api.CancelTaskGraph(
                pb.CancelTaskGraphRequest(project_id=PROJECT, task_graph_id=ids[i])
            )

        async def pages(size: int, statuses: list[int]) -> list[list[str]]:
            found, page_token = [], ""
            for _ in range(GRAPHS + 1):
                reply = await api.ListTaskGraphs(
                    pb.ListTaskGraphsRequest(
                        project_id=PROJECT,
                        page_size=size,
                        page_token=page_token,
                        statuses=statuses,
                    )
                )
                assert all(g.status in statuses for g in reply.task_graphs if statuses)
                assert all(g.counts.total == 2 for g in reply.task_graphs)
                found.append([g.id for g in reply.task_graphs])
                page_token = reply.next_page_token
                if not page_token:
                    return found
            raise AssertionError("the pages never ended")

        failed = newest_first(ids, FAILED)
        assert await pages(2, [S.TASK_GRAPH_STATUS_FAILED]) == chunks(failed, 2)
        assert await pages(5, [S.TASK_GRAPH_STATUS_FAILED]) == [failed]
        assert await pages(3, [S.TASK_GRAPH_STATUS_PAUSED, S.TASK_GRAPH_STATUS_CANCELLED]) == (
            chunks(newest_first(ids, PAUSED, CANCELLED), 3)
        )
        assert await pages(0, [S.TASK_GRAPH_STATUS_ACTIVE]) == [newest_first(ids, ACTIVE)]
        everything = ids[::-1]
        assert await pages(64, []) == chunks(everything, 64)
        completed = [g for g in everything if g not in newest_first(ids, FAILED, PAUSED, ACTIVE)]
        completed = [g for g in completed if g not in newest_first(ids, CANCELLED)]
        assert await pages(90, [S.TASK_GRAPH_STATUS_COMPLETED]) == chunks(completed, 90)
    finally:
        await stack.close()


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", ()):
        yield from _nodes(child)


async def rows_read(pool: asyncpg.Pool, statements: Sequence[tuple[str, Any]]) -> float:
    """Rows the statements' table and index scans produced or filtered out, all loops."""
    total = 0.0
    for sql, args in statements:
        plan = await pool.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", *args)
        for node in _nodes(plan[0]["Plan"]):
            if "Relation Name" in node:
                seen = node["Actual Rows"] + node.get("Rows Removed by Filter", 0)
                total += (seen + node.get("Rows Removed by Index Recheck", 0)) * node[
                    "Actual Loops"
                ]
    return total


async def test_a_filtered_page_reads_the_rows_of_its_page_not_of_the_project(
    database_url: str, db_pool: asyncpg.Pool
) -> None:
    """Fails on the listing that filtered in Python, which read graphs and their tasks in
    batches of 200 until a page was full: 634 rows for the first page of FAILED here and
    1,634 with twice the graphs, against 24 and 24 (a page of 10 without a filter: 634
    against 66)."""
    await fill(db_pool, GRAPHS)
    # Other projects' objects and edges, and statistics of them all: the planner chooses as
    # it would in a database of some size (on a nearly empty one, reading every row of a
    # table in one go is cheaper than looking a few up, and it says so).
    await db_pool.execute(
        """
        INSERT INTO kb.graph_objects (project_id, type, properties)
        SELECT 'other-' || (i % 50), 'Note', jsonb_build_object('title', 'note ' || i)
        FROM generate_series(1, 20000) AS i;
        INSERT INTO kb.graph_relationships (project_id, type, src_id, dst_id)
        SELECT a.project_id, 'blocks', a.id, b.id
        FROM (SELECT project_id, id, row_number() OVER (ORDER BY id) AS n
              FROM kb.graph_objects WHERE type = 'Note') a
        JOIN (SELECT project_id, id, row_number() OVER (ORDER BY id) AS n
              FROM kb.graph_objects WHERE type = 'Note') b
          ON b.n = a.n + 1 AND b.project_id = a.project_id;
        ANALYZE;
        """
    )
    logged: list[tuple[str, Any]] = []
    # One connection, which logs every statement the listing runs.
    pool = await db.create_pool(database_url, min_size=1, max_size=1)
    async with pool.acquire() as conn:
        conn.add_query_logger(lambda q: logged.append((q.query, q.args)))
    listing = DispatcherServicer(pool=pool, runs=None, watcher=None)  # type: ignore[arg-type]

    async def page_reads(statuses: list[int], size: int) -> list[float]:
        """Rows read by each page of the listing, its pages as they come."""
        reads, page_token = [], ""
        for _ in itertools.count():
            logged.clear()
            request = pb.ListTaskGraphsRequest(
                project_id=PROJECT, page_size=size, page_token=page_token, statuses=statuses
            )
            reply = await listing.ListTaskGraphs(request, None)  # type: ignore[arg-type]
            selects = [(q, a) for q, a in logged if q.lstrip().upper().startswith("SELECT")]
            reads.append(await rows_read(db_pool, selects))
            page_token = reply.next_page_token
            if not page_token or len(reads) == 3:
                return reads

    try:
        cases = {
            "failed": ([S.TASK_GRAPH_STATUS_FAILED], 2),
            "paused or active": ([S.TASK_GRAPH_STATUS_PAUSED, S.TASK_GRAPH_STATUS_ACTIVE], 1),
            "no filter": ([], 10),
        }
        before = {name: await page_reads(*case) for name, case in cases.items()}
        for name, (statuses, size) in cases.items():
            # The page's graphs (size + 1), one index entry per status for each, their
            # tasks (2 each) and each task's blockers: a few rows per graph of the page.
            bound = 12 * (size + 1) + 3 * len(statuses or S.values())
            assert max(before[name]) <= bound, (name, before[name], bound)
        # Twice the graphs, the new ones completed (the newest): the filtered pages read
        # what they read before.
        await fill(db_pool, GRAPHS, mixed=False)
        after = {name: await page_reads(*case) for name, case in cases.items()}
        for name, (statuses, _) in cases.items():
            if statuses:
                assert sum(after[name]) <= 1.1 * sum(before[name]), (name, before, after)
    finally:
        await pool.close()


async def test_a_forged_token_position_is_invalid_argument(
    database_url: str, db_pool: asyncpg.Pool
) -> None:
    # Tokens are opaque, not signed: a member can write one with the right filters and any
    # position. Whatever it holds, the answer names the field and nothing is read with it.
    await fill(db_pool, 3)
    task_id = str(
        await db_pool.fetchval(
            "SELECT id FROM kb.graph_objects WHERE project_id = $1 AND type = 'SpecTask' LIMIT 1",
            PROJECT,
        )
    )
    some_id = str(uuid.uuid4())
    # ListTaskGraphs' positions are (created_at, id); ListTaskSessions' (attempt, id).
    graph_positions = [
        [1, 2],
        ["2026-11-27T00:00:00+00:00", "not-a-uuid"],
        [datetime(2026, 11, 27, tzinfo=UTC), 7],
        [None, None],
    ]
    session_positions = [["x", some_id], [1, 5], [2**40, some_id], [True, some_id], [None, None]]
    stack = await start_stack(database_url=database_url, pool=db_pool, names=("dispatcher",))
    try:
        token = await stack.create_token(PROJECT, role="member")
        api = dispatcher_pb2_grpc.DispatcherServiceStub(stack.channel("dispatcher", token=token))
        calls = [
            api.ListTaskGraphs(
                pb.ListTaskGraphsRequest(
                    project_id=PROJECT,
                    page_token=encode_page_token(p, {"project_id": PROJECT, "statuses": []}),
                )
            )
            for p in graph_positions
        ] + [
            api.ListTaskSessions(
                pb.ListTaskSessionsRequest(
                    project_id=PROJECT,
                    task_id=task_id,
                    page_token=encode_page_token(p, {"project_id": PROJECT, "task_id": task_id}),
                )
            )
            for p in session_positions
        ]
        for position, call in zip(graph_positions + session_positions, calls, strict=True):
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await call
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, position
            assert "page_token" in (caught.value.details() or ""), position
    finally:
        await stack.close()
