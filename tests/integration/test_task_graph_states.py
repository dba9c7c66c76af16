"""A task graph's derived status, kept per graph in kb.task_graph_states (migration 0020) by
the one rule kb.task_graph_status, on a real PostgreSQL: in every state it equals the rule
the dispatcher applied in Python over the task counts before 0020 (kept here as the
oracle), the rule evaluated afresh and the status GetTaskGraph shows; any writer's change
(the dispatcher's, the graph library's, a plain UPDATE or DELETE, an edge from another
graph) keeps it current; concurrent transactions that finish a graph's last tasks leave it
COMPLETED; and commits that touch the same graphs in opposite orders do not deadlock."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Mapping

import asyncpg

from agentfleet.graph import BLOCKS, GraphRepository, NewObject
from agentfleet.testing.waiting import wait_for
from services.dispatcher.graphs.graph_reads import GraphReader
from services.dispatcher.models import TASK_GRAPH, Counts
from services.dispatcher.store import reads, task_graphs
from tests.integration.one_task_graph import new_graph

PROJECT = "states"
STATUSES = {"active", "completed", "failed", "paused", "cancelled"}


def rule_over_counts(cancelled: bool, counts: Counts) -> str:
    """The oracle: how the dispatcher derived a graph's status in Python before 0020."""
    if cancelled:
        return "cancelled"
    get = counts.by_status.get
    if counts.total > 0 and get("completed", 0) == counts.total:
        return "completed"
    if get("in_progress", 0) > 0 or counts.available > 0:
        return "active"
    if get("failed", 0) > 0:
        return "failed"
    if get("paused", 0) > 0:
        return "paused"
    return "active"


async def put(pool: asyncpg.Pool, task_id: str, status: str | None) -> None:
    """Sets a task's status as any writer of graph objects may (here the graph library)."""
    repo = GraphRepository(pool)
    if status is None:
        await repo.update_object(PROJECT, task_id, set_properties={}, unset_properties=["status"])
    else:
        await repo.update_object(PROJECT, task_id, set_properties={"status": status})


async def cancel(pool: asyncpg.Pool, graph_id: str) -> None:
    async with pool.acquire() as conn, conn.transaction():
        assert await task_graphs.cancel_graph(conn, PROJECT, graph_id, "stop")
        await task_graphs.cancel_pending_tasks(conn, PROJECT, graph_id)


async def kept(pool: asyncpg.Pool, graph_id: str) -> str:
    return await pool.fetchval(
        "SELECT status FROM kb.task_graph_states WHERE graph_id = $1", uuid.UUID(graph_id)
    )


async def statuses_of(pool: asyncpg.Pool, graph_id: str) -> dict[str, str]:
    """The status as kept, by the rule evaluated now, by the oracle over the task counts,
    and as GetTaskGraph's reader shows it."""
    row = await pool.fetchrow(
        "SELECT s.status AS kept, g.status = 'cancelled' AS cancelled,"
        " kb.task_graph_status(g.project_id, g.id, g.status) AS rule"
        " FROM kb.graph_objects g JOIN kb.task_graph_states s ON s.graph_id = g.id"
        " WHERE g.id = $1",
        uuid.UUID(graph_id),
    )
    found = await reads.graph_counts(pool, PROJECT, [graph_id])
    counts = found[graph_id][0] if graph_id in found else Counts()
    return {
        "kept": row["kept"],
        "rule": row["rule"],
        "oracle": rule_over_counts(row["cancelled"], counts),
        "view": (await GraphReader(pool).load(PROJECT, graph_id, with_tasks=False)).status,
    }


def agreeing(found: Mapping[str, str], expected: str) -> bool:
    return set(found.values()) == {expected}


# name: task statuses by key (None: no status property), edges, cancelled, expected.
CASES: dict[str, tuple[dict[str, str | None], list[tuple[str, str]], bool, str]] = {
    "a task available": ({"a": "pending"}, [], False, "active"),
    "a task in progress": ({"a": "in_progress", "b": "pending"}, [("a", "b")], False, "active"),
    "every task completed": (
        {"a": "completed", "b": "completed"}, [("a", "b")], False, "completed"
    ),
    "failed, its dependent waits": ({"a": "failed", "b": "pending"}, [("a", "b")], False, "failed"),
    "failed, another task available": (
        {"a": "failed", "b": "pending", "c": "pending"}, [("a", "b")], False, "active"
    ),
    "paused, its dependent waits": ({"a": "paused", "b": "pending"}, [("a", "b")], False, "paused"),
    "failed and paused": ({"a": "failed", "b": "paused"}, [], False, "failed"),
    "waiting on a cancelled task": (
        {"a": "cancelled", "b": "pending"}, [("a", "b")], False, "active"
    ),
    "completed and cancelled tasks": ({"a": "completed", "b": "cancelled"}, [], False, "active"),
    "a task without a status": ({"a": "completed", "b": None}, [], False, "active"),
    "cancelled": ({"a": "completed", "b": "pending"}, [("a", "b")], True, "cancelled"),
}  # fmt: skip


async def test_every_status_agrees_with_the_rule_the_oracle_and_the_view(
    db_pool: asyncpg.Pool,
) -> None:
    for name, (statuses, edges, cancelled, expected) in CASES.items():
        graph_id, ids = await new_graph(db_pool, PROJECT, list(statuses), edges)
        for key, status in statuses.items():
            if status != "pending":
                await put(db_pool, ids[key], status)
        if cancelled:
            await cancel(db_pool, graph_id)
        found = await statuses_of(db_pool, graph_id)
        assert agreeing(found, expected), (name, found)
    assert {case[-1] for case in CASES.values()} == STATUSES
    # A graph with no task yet (an object no dispatcher call makes, a graph tool can).
    empty = NewObject(type=TASK_GRAPH, properties={"status": "active"})
    await GraphRepository(db_pool).create_objects(PROJECT, [empty])
    assert agreeing(await statuses_of(db_pool, str(empty.id)), "active")


async def test_random_graphs_agree_in_every_status(db_pool: asyncpg.Pool) -> None:
    rng = random.Random(2020)
    seen = set()
    for _ in range(40):
        keys = [f"t{i}" for i in range(rng.randint(1, 5))]
        edges = [(a, b) for i, a in enumerate(keys) for b in keys[i + 1 :] if rng.random() < 0.4]
        graph_id, ids = await new_graph(db_pool, PROJECT, keys, edges)
        for key in keys:
            status = rng.choice(["pending", "pending", "completed", "completed", "in_progress",
                                 "failed", "paused", "cancelled", None])  # fmt: skip
            if status != "pending":
                await put(db_pool, ids[key], status)
        if rng.random() < 0.1:
            await cancel(db_pool, graph_id)
        found = await statuses_of(db_pool, graph_id)
        assert len(set(found.values())) == 1, (keys, edges, found)
        seen.add(found["kept"])
    assert seen == STATUSES


async def test_changes_from_elsewhere_keep_it_current(db_pool: asyncpg.Pool) -> None:
    """A blocker in another graph (an edge a graph tool may write), the edge itself, a
    deleted task, a deleted graph and an object that stops being a graph: the kept status
    follows each."""
    first, one = await new_graph(db_pool, PROJECT, ["a"])
    second, two = await new_graph(db_pool, PROJECT, ["x", "y"])
    await put(db_pool, one["a"], "in_progress")
    await put(db_pool, two["x"], "failed")
    assert await kept(db_pool, second) == "active"  # y is available
    repo = GraphRepository(db_pool)
    edge, _ = await repo.create_relationship(PROJECT, type=BLOCKS, src_id=one["a"], dst_id=two["y"])
    assert await kept(db_pool, second) == "failed"  # y now waits on a, in progress
    await put(db_pool, one["a"], "completed")
    assert (await kept(db_pool, first), await kept(db_pool, second)) == ("completed", "active")
    await put(db_pool, one["a"], "paused")
    assert (await kept(db_pool, first), await kept(db_pool, second)) == ("paused", "failed")
    await repo.delete_relationship(PROJECT, edge.id)
    assert await kept(db_pool, second) == "active"
    await put(db_pool, two["y"], "completed")
    assert await kept(db_pool, second) == "failed"
    await repo.delete_object(PROJECT, two["x"])
    assert await kept(db_pool, second) == "completed"
    await repo.delete_object(PROJECT, second)
    assert await kept(db_pool, second) is None
    await db_pool.execute("UPDATE kb.graph_objects SET type = 'Note' WHERE id = $1::uuid", first)
    assert await kept(db_pool, first) is None  # no longer a task graph


async def test_concurrent_last_tasks_leave_the_graph_completed(db_pool: asyncpg.Pool) -> None:
    """Each transaction completes one task of the graph and commits while the others are
    open: each sees the others' tasks still in progress. (Without the lock the commit takes
    before it reads, the graph ended ACTIVE.) Eight tasks: each transaction holds one of
    the pool's ten connections until all are open."""
    for _ in range(5):
        graph_id, ids = await new_graph(db_pool, PROJECT, [f"t{i}" for i in range(8)])
        for task_id in ids.values():
            await put(db_pool, task_id, "in_progress")

        async def complete(task_id: str, opened: asyncio.Barrier) -> None:
            async with db_pool.acquire() as conn, conn.transaction():
                await GraphRepository.bound(conn).update_object(
                    PROJECT, task_id, set_properties={"status": "completed"}
                )
                await opened.wait()

        opened = asyncio.Barrier(len(ids))
        await asyncio.gather(*(complete(t, opened) for t in ids.values()))
        assert agreeing(await statuses_of(db_pool, graph_id), "completed")


async def test_commits_touching_graphs_in_opposite_orders_do_not_deadlock(
    db_pool: asyncpg.Pool,
) -> None:
    """Two transactions each finish a task of graph G and one of graph H, A in the order
    G, H and B in the order H, G, and commit while G's and H's rows are held by others. H is
    released first, then G. Taking the rows in the order touched, B would hold H and wait
    for G behind A, and A, given G, would wait for H: a deadlock, every time. Taken in id
    order, one commit waits for the other."""
    (g, g_ids), (h, h_ids) = [await new_graph(db_pool, PROJECT, ["t", "u"]) for _ in range(2)]
    for task_id in [*g_ids.values(), *h_ids.values()]:
        await put(db_pool, task_id, "in_progress")

    async def finish(*task_ids: str) -> None:
        async with db_pool.acquire() as conn, conn.transaction():
            for task_id in task_ids:
                await GraphRepository.bound(conn).update_object(
                    PROJECT, task_id, set_properties={"status": "completed"}
                )

    async def commits_waiting(not_on: int) -> bool:
        """Both commits wait for a lock, neither for the session ``not_on``."""
        return await db_pool.fetchval(
            "SELECT count(*) = 2 FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock' AND query LIKE 'COMMIT%'"
            " AND NOT $1 = ANY(pg_blocking_pids(pid))",
            not_on,
        )

    async with db_pool.acquire() as holds_g, db_pool.acquire() as holds_h:
        held = []
        for conn, graph_id in ((holds_g, g), (holds_h, h)):
            held.append(conn.transaction())
            await held[-1].start()
            await conn.execute(
                "SELECT 1 FROM kb.task_graph_states WHERE graph_id = $1 FOR UPDATE",
                uuid.UUID(graph_id),
            )
        both = asyncio.gather(finish(g_ids["t"], h_ids["t"]), finish(h_ids["u"], g_ids["u"]))
        await wait_for(lambda: commits_waiting(not_on=0), "both commits waiting")
        await held[1].commit()
        h_pid = holds_h.get_server_pid()
        await wait_for(lambda: commits_waiting(not_on=h_pid), "both commits waiting, not for H")
        await held[0].commit()
        await both
    assert (await kept(db_pool, g), await kept(db_pool, h)) == ("completed", "completed")
