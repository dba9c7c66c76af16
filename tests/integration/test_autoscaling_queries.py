"""The queue-depth queries KEDA scales on (and the gauges sample) against the migrated schema:
on an analysed database with a long history and known queued, running and in-flight rows,
each counts exactly those rows and reads them through its partial index, not the history.
No planner setting is forced: the indexes must win on their own merits."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import pytest
import pytest_asyncio

from agentfleet.queue_depth import (
    ACTIVE_RUNS_BY_PROJECT_SQL,
    DISPATCHER_LOAD_SQL,
    EXECUTOR_LOAD_SQL,
    TASKS_BY_STATE_SQL,
)
from agentfleet.testing.database import DatabaseFactory

HISTORY = 30_000
"""Finished runs and finished tasks: what the queries must not read."""
ACTIVE_RUNS = {("alpha", "queued"): 7, ("alpha", "running"): 3, ("beta", "queued"): 2}
TASKS = {"ready": 5, "blocked": 4, "in_progress": 6}


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def fleet_db(database_factory: DatabaseFactory) -> AsyncIterator[asyncpg.Pool]:
    async with database_factory.filled_pool(_fill) as pool:
        yield pool


async def _fill(conn: asyncpg.Connection) -> None:
    await conn.execute(
        """
        INSERT INTO kb.agent_runs (project_id, agent_name, status, created_at, completed_at)
        SELECT CASE WHEN i % 3 = 0 THEN 'beta' ELSE 'alpha' END, 'agent',
               CASE WHEN i % 10 = 0 THEN 'failed' WHEN i % 10 = 1 THEN 'paused'
                    ELSE 'completed' END,
               now() - make_interval(secs => i),
               CASE WHEN i % 10 <> 1 THEN now() - make_interval(secs => i) + interval '1 s' END
        FROM generate_series(1, $1::int) AS i
        """,
        HISTORY,
    )
    for (project, status), count in ACTIVE_RUNS.items():
        running = status == "running"
        await conn.execute(
            """
            INSERT INTO kb.agent_runs (project_id, agent_name, status, lease_owner,
                                       lease_expires_at)
            SELECT $1, 'agent', $2, CASE WHEN $3 THEN 'worker' END,
                   CASE WHEN $3 THEN now() + interval '30 s' END
            FROM generate_series(1, $4::int)
            """,
            project,
            status,
            running,
            count,
        )
    await _tasks(conn, HISTORY, {"status": "completed", "ready": False})
    await _tasks(conn, TASKS["ready"], {"status": "pending", "ready": True, "priority": 1})
    await _tasks(conn, TASKS["blocked"], {"status": "pending", "ready": False})
    await _tasks(conn, TASKS["in_progress"], {"status": "in_progress", "ready": False})
    # Other object types in the same states are no tasks.
    await conn.execute(
        "INSERT INTO kb.graph_objects (project_id, type, properties) "
        "SELECT 'alpha', 'Session', '{\"status\": \"in_progress\"}' FROM generate_series(1, 50)"
    )
    # VACUUM too: index-only scans' costs depend on the visibility map, which autovacuum may
    # or may not have set by the time of EXPLAIN; settled, as a production table is.
    await conn.execute("VACUUM ANALYZE")


async def _tasks(conn: asyncpg.Connection, count: int, properties: dict[str, Any]) -> None:
    await conn.execute(
        "INSERT INTO kb.graph_objects (project_id, type, properties) "
        "SELECT 'alpha', 'SpecTask', $1::jsonb || jsonb_build_object('graph_id', 'g' || (i % 7))"
        " FROM generate_series(1, $2::int) AS i",
        properties,
        count,
    )


async def test_the_executor_load_counts_queued_and_running_runs(fleet_db: asyncpg.Pool) -> None:
    assert await fleet_db.fetchval(EXECUTOR_LOAD_SQL) == sum(ACTIVE_RUNS.values())


async def test_the_dispatcher_load_counts_available_and_in_progress_tasks(
    fleet_db: asyncpg.Pool,
) -> None:
    assert await fleet_db.fetchval(DISPATCHER_LOAD_SQL) == TASKS["ready"] + TASKS["in_progress"]


async def test_the_gauge_samples_count_runs_per_project_and_tasks_per_state(
    fleet_db: asyncpg.Pool,
) -> None:
    runs = await fleet_db.fetch(ACTIVE_RUNS_BY_PROJECT_SQL)
    assert {(r["project_id"], r["status"]): r["runs"] for r in runs} == ACTIVE_RUNS
    tasks = await fleet_db.fetch(TASKS_BY_STATE_SQL)
    assert {r["state"]: r["tasks"] for r in tasks} == TASKS


@pytest.mark.parametrize(
    ("sql", "table", "indexes"),
    [
        (
            EXECUTOR_LOAD_SQL,
            "agent_runs",
            {"agent_runs_queued_project_idx", "agent_runs_running_lease_idx"},
        ),
        (
            ACTIVE_RUNS_BY_PROJECT_SQL,
            "agent_runs",
            {"agent_runs_queued_project_idx", "agent_runs_running_lease_idx"},
        ),
        (
            DISPATCHER_LOAD_SQL,
            "graph_objects",
            # Any partial index of the available tasks serves the count (0018 added the
            # per-project one the claim walks, 0021 the per-graph one; the planner may pick
            # either).
            {
                "graph_objects_ready_spectasks_idx|graph_objects_ready_spectasks_project_idx"
                "|graph_objects_ready_spectasks_graph_idx",
                "graph_objects_inprogress_spectasks_idx",
            },
        ),
        (
            TASKS_BY_STATE_SQL,
            "graph_objects",
            {"graph_objects_pending_spectasks_idx", "graph_objects_inprogress_spectasks_idx"},
        ),
    ],
    ids=["executor-load", "runs-by-project", "dispatcher-load", "tasks-by-state"],
)
async def test_each_query_reads_its_partial_indexes_not_the_history(
    fleet_db: asyncpg.Pool, sql: str, table: str, indexes: set[str]
) -> None:
    plan = await fleet_db.fetchval(f"EXPLAIN (FORMAT JSON) {sql}")
    nodes = list(_nodes(plan[0]["Plan"]))
    described = [(n["Node Type"], n.get("Relation Name"), n.get("Index Name")) for n in nodes]
    scans = [n for n in nodes if n.get("Relation Name") == table]
    assert scans, described
    assert all(n["Node Type"] != "Seq Scan" for n in scans), described
    used = {n.get("Index Name") for n in nodes if "Index Name" in n}
    # Each expected entry is one index, or alternatives separated by "|": exactly one used.
    assert len(used) == len(indexes), described
    for entry in indexes:
        assert len(used & set(entry.split("|"))) == 1, described


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", ()):
        yield from _nodes(child)
