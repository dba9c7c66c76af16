"""Hot queries keep using their indexes (EXPLAIN on a realistically sized, analysed table).

The statements here have the shape the executor and history repositories use: if a change to
a query or to the schema makes PostgreSQL fall back to a sequential scan or a sort, this
fails. No planner setting is forced: the indexes must win on their own merits.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest
import pytest_asyncio

from agentfleet.testing.database import DatabaseFactory
from services.dispatcher.graphs.dag import NewTask
from services.dispatcher.graphs.graph_writes import GraphStore
from services.dispatcher.store import dependents, transitions
from services.executor.store import caps, claim_sql

RUNS = 40_000


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def history(database_factory: DatabaseFactory) -> AsyncIterator[asyncpg.Pool]:
    """One database for the module (filling it takes a second or two), analysed:
    40k runs in two projects, most completed, a few queued and running; a run tree with
    a wide middle level; long conversations, event logs and tool call lists."""
    async with database_factory.filled_pool(_fill) as pool:
        yield pool


async def _fill(conn: asyncpg.Connection) -> None:
    await conn.execute(
        """
        INSERT INTO kb.agent_runs (project_id, agent_name, status, created_at, completed_at,
                                   lease_owner, lease_expires_at)
        SELECT CASE WHEN i % 5 = 0 THEN 'other' ELSE 'demo' END,
               'agent-' || (i % 20),
               s.status,
               t.created_at,
               CASE WHEN s.status IN ('completed', 'failed')
                    THEN t.created_at + interval '5 seconds' END,
               CASE WHEN s.status = 'running' THEN 'worker-1' END,
               CASE WHEN s.status = 'running' THEN now() + interval '30 seconds' END
        FROM generate_series(1, $1::int) AS i,
             LATERAL (SELECT now() - make_interval(secs => $1::int - i) AS created_at) t,
             LATERAL (SELECT CASE WHEN i % 400 = 0 THEN 'queued'
                                  WHEN i % 400 = 1 THEN 'running'
                                  WHEN i % 50 = 2 THEN 'failed'
                                  ELSE 'completed' END AS status) s
        """,
        RUNS,
    )
    # A tree: root -> 20 children -> 300 grandchildren under the first child, so the
    # parent filter and the root filter each select many rows, and different ones.
    root = await conn.fetchval(
        "SELECT id FROM kb.agent_runs WHERE project_id = 'demo' AND status = 'completed'"
        " ORDER BY created_at LIMIT 1"
    )
    await _add_children(conn, root, root, 1, 20)
    middle = await conn.fetchval(
        "SELECT id FROM kb.agent_runs WHERE parent_run_id = $1 LIMIT 1", root
    )
    await _add_children(conn, middle, root, 2, 300)
    runs = "SELECT id, root_run_id FROM kb.agent_runs ORDER BY created_at DESC LIMIT 10"
    await conn.execute(
        f"""
        INSERT INTO kb.agent_run_messages (run_id, seq, step_number, role, agent_name, content)
        SELECT runs.id, s, s / 2, CASE WHEN s % 2 = 0 THEN 'model' ELSE 'user' END, 'agent',
               jsonb_build_object('parts', jsonb_build_array(jsonb_build_object('text', 'x')))
        FROM ({runs}) runs, generate_series(0, 999) AS s
        """
    )
    await conn.execute(
        f"""
        INSERT INTO kb.agent_run_events (run_id, seq, root_run_id, type, agent_name)
        SELECT runs.id, s, runs.root_run_id, 'MODEL_TEXT', 'agent'
        FROM ({runs}) runs, generate_series(1, 2000) AS s
        """
    )
    await conn.execute(
        f"""
        INSERT INTO kb.agent_run_tool_calls (run_id, tool_call_id, step_number, tool_name,
                                             source, status, created_at)
        SELECT runs.id, 'call-' || s, s, 'get_entity', 'builtin', 'completed',
               now() + make_interval(secs => s)
        FROM ({runs}) runs, generate_series(1, 1000) AS s
        """
    )
    await conn.execute("ANALYZE")


async def _add_children(
    conn: asyncpg.Connection, parent: object, root: object, depth: int, count: int
) -> None:
    await conn.execute(
        """
        INSERT INTO kb.agent_runs (project_id, agent_name, status, parent_run_id, root_run_id,
                                   depth, created_at, completed_at)
        SELECT 'demo', 'child', 'completed', $1, $2, $3,
               now() + make_interval(secs => c), now() + make_interval(secs => c + 1)
        FROM generate_series(1, $4::int) AS c
        """,
        parent,
        root,
        depth,
        count,
    )


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", ()):
        yield from _nodes(child)


async def _plan(pool: asyncpg.Pool, sql: str, *args: object) -> list[dict[str, Any]]:
    # The pool decodes the json EXPLAIN output into Python values.
    result = await pool.fetchval(f"EXPLAIN (FORMAT JSON) {sql}", *args)
    return list(_nodes(result[0]["Plan"]))


def _assert_uses(nodes: list[dict[str, Any]], table: str, index: str) -> None:
    described = [(n["Node Type"], n.get("Relation Name"), n.get("Index Name")) for n in nodes]
    scans = [n for n in nodes if n.get("Relation Name") == table]
    assert scans, described
    assert all(n["Node Type"] != "Seq Scan" for n in scans), described
    assert any(n.get("Index Name") == index for n in scans), described
    # Keyset pages come out of the index in order; a Sort would read the whole range.
    assert all(n["Node Type"] not in ("Sort", "Incremental Sort") for n in nodes), described


async def test_claim_walks_the_queue_by_project_on_its_index(history: asyncpg.Pool) -> None:
    """The real claim statement (expired leases, then queued runs round robin across
    projects): every read of agent_runs goes through an index, the queue's own for the
    projects and their queued runs. Its only Sort orders the few candidates it picked."""
    nodes = await _plan(history, claim_sql.CLAIM_ANY, "worker-2", 30.0, 8, 64)
    described = [(n["Node Type"], n.get("Relation Name"), n.get("Index Name")) for n in nodes]
    scans = [n for n in nodes if n.get("Relation Name") == "agent_runs"]
    assert scans, described
    assert all(n["Node Type"] != "Seq Scan" for n in scans), described
    indexes = {n.get("Index Name") for n in scans}
    assert {"agent_runs_queued_project_idx", "agent_runs_running_lease_idx"} <= indexes, described
    assert "agent_runs_queued_idx" not in indexes, described


async def test_queued_cap_count_uses_the_queue_index(history: asyncpg.Pool) -> None:
    """TriggerRun's insert counts the project's queued capped runs, at most the cap."""
    nodes = await _plan(
        history,
        f"""
        SELECT count(*) FROM (
            SELECT 1 FROM kb.agent_runs r
            WHERE r.project_id = $1::text AND r.status = 'queued' AND {caps.capped("r")}
            LIMIT $2::integer) queued
        """,
        "demo",
        1000,
    )
    # Either index bounds the scan to the project's queued runs (the planner picks by the
    # statistics of the moment); what must never happen is a scan of the whole table.
    try:
        _assert_uses(nodes, "agent_runs", "agent_runs_queued_project_idx")
    except AssertionError:
        _assert_uses(nodes, "agent_runs", "agent_runs_project_status_created_idx")


async def test_expired_lease_query_uses_the_lease_index(history: asyncpg.Pool) -> None:
    nodes = await _plan(
        history,
        """
        SELECT id FROM kb.agent_runs
        WHERE status = 'running' AND lease_expires_at < now()
        LIMIT $1
        FOR UPDATE SKIP LOCKED
        """,
        4,
    )
    _assert_uses(nodes, "agent_runs", "agent_runs_running_lease_idx")


LIST_RUNS = """
    SELECT id, agent_name, status, created_at, duration_ms, step_count, tokens_in, tokens_out
    FROM kb.agent_runs
    WHERE project_id = $1 {filter}
      AND (created_at, id) < ($2::timestamptz, $3::uuid)
    ORDER BY created_at DESC, id DESC
    LIMIT $4
"""


@pytest.mark.parametrize(
    ("filter_sql", "index"),
    [
        ("", "agent_runs_project_created_idx"),
        ("AND agent_name = $5", "agent_runs_project_agent_created_idx"),
        ("AND status = $5", "agent_runs_project_status_created_idx"),
        ("AND parent_run_id = $5::uuid", "agent_runs_parent_created_idx"),
        ("AND root_run_id = $5::uuid", "agent_runs_root_created_idx"),
    ],
    ids=["no filter", "agent", "status", "parent", "root"],
)
async def test_list_runs_keyset_page_uses_its_index(
    history: asyncpg.Pool, filter_sql: str, index: str
) -> None:
    middle, root = await history.fetchrow(
        "SELECT parent_run_id, root_run_id FROM kb.agent_runs WHERE depth = 2 LIMIT 1"
    )
    filter_value = {
        "agent_runs_project_agent_created_idx": "agent-7",
        "agent_runs_project_status_created_idx": "failed",
        "agent_runs_parent_created_idx": middle,
        "agent_runs_root_created_idx": root,
    }
    # A cursor past the newest runs: page two onwards.
    cursor = await history.fetchrow(
        "SELECT created_at, id FROM kb.agent_runs ORDER BY created_at DESC OFFSET $1 LIMIT 1",
        60,
    )
    args: list[object] = ["demo", cursor["created_at"], cursor["id"], 51]
    if filter_sql:
        args.append(filter_value[index])

    nodes = await _plan(history, LIST_RUNS.format(filter=filter_sql), *args)

    _assert_uses(nodes, "agent_runs", index)


async def test_first_list_runs_page_uses_the_project_index(history: asyncpg.Pool) -> None:
    nodes = await _plan(
        history,
        """
        SELECT id FROM kb.agent_runs
        WHERE project_id = $1 AND created_at >= $2 AND created_at < $3
        ORDER BY created_at DESC, id DESC
        LIMIT 51
        """,
        "demo",
        datetime(2000, 1, 1, tzinfo=UTC),
        datetime(2100, 1, 1, tzinfo=UTC),
    )
    _assert_uses(nodes, "agent_runs", "agent_runs_project_created_idx")


async def _some_run(pool: asyncpg.Pool) -> object:
    return await pool.fetchval("SELECT run_id FROM kb.agent_run_events LIMIT 1")


async def test_message_page_uses_run_seq(history: asyncpg.Pool) -> None:
    nodes = await _plan(
        history,
        "SELECT id, seq, role FROM kb.agent_run_messages"
        " WHERE run_id = $1 AND seq > $2 ORDER BY seq LIMIT 51",
        await _some_run(history),
        10,
    )
    _assert_uses(nodes, "agent_run_messages", "agent_run_messages_run_seq_key")


async def test_event_replay_uses_the_primary_key(history: asyncpg.Pool) -> None:
    """Through the view every read of events takes: a step's tool arguments and results
    come from their call rows, each found by its unique key."""
    nodes = await _plan(
        history,
        "SELECT seq, type, payload FROM kb.agent_run_events_shown"
        " WHERE run_id = $1 AND seq > $2 ORDER BY seq LIMIT 500",
        await _some_run(history),
        10,
    )
    _assert_uses(nodes, "agent_run_events", "agent_run_events_pkey")
    _assert_uses(nodes, "agent_run_tool_calls", "agent_run_tool_calls_run_call_uidx")


async def test_tool_call_page_uses_run_created(history: asyncpg.Pool) -> None:
    first = await history.fetchrow(
        "SELECT run_id, created_at, id FROM kb.agent_run_tool_calls ORDER BY created_at LIMIT 1"
    )
    nodes = await _plan(
        history,
        "SELECT id, tool_name, status FROM kb.agent_run_tool_calls"
        " WHERE run_id = $1 AND (created_at, id) > ($2, $3) ORDER BY created_at, id LIMIT 51",
        first["run_id"],
        first["created_at"],
        first["id"],
    )
    _assert_uses(nodes, "agent_run_tool_calls", "agent_run_tool_calls_run_created_idx")


# -- the dispatcher (issue 8) ---------------------------------------------------------------
#
# A task graph created in a fresh database is the dispatcher's worst case: the statistics
# are from the empty tables, so the planner believes every index empty. Its statements must
# still find each dependent by primary key; a scan of the project's SpecTask index per
# dependent made the cost per task grow with the graph (5 ms at 10,000 tasks vs 3 at 2,500).

GRAPH_TASKS = 2_000
"""Above statistics.ANALYZE_MIN_ROWS: a graph this big refreshes the planner statistics."""


@pytest_asyncio.fixture(loop_scope="session")
async def fresh_graph(db_pool: asyncpg.Pool) -> list[asyncpg.Record]:
    """A chain-shaped graph written by GraphStore into never-analysed tables (autovacuum
    off, so only the store can refresh the statistics); its tasks, first blocker first."""
    for table in ("graph_objects", "graph_relationships", "agent_runs"):
        await db_pool.execute(f"ALTER TABLE kb.{table} SET (autovacuum_enabled = false)")
    tasks = [NewTask(key=f"t{i}", title=f"task {i}") for i in range(GRAPH_TASKS)]
    edges = [(f"t{i}", f"t{i + 1}") for i in range(GRAPH_TASKS - 1)]
    await GraphStore(db_pool).create_graph(
        "plans",
        title="chain",
        tasks=tasks,
        edges=edges,
        max_parallel=0,
        labels={},
        request_id="",
        validate_only=False,
    )
    return await db_pool.fetch(
        "SELECT project_id, id, properties ->> 'graph_id' AS graph_id FROM kb.graph_objects"
        " WHERE project_id = 'plans' AND type = 'SpecTask' ORDER BY created_at, id LIMIT 16"
    )


def _graph_object_reads(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        n
        for n in nodes
        if n["Node Type"] in ("Seq Scan", "Index Scan", "Index Only Scan", "Bitmap Index Scan")
        and (
            n.get("Relation Name") == "graph_objects"
            or str(n.get("Index Name", "")).startswith("graph_objects_")
        )
    ]


def _assert_probes_by_id(nodes: list[dict[str, Any]], *, page_index: str | None = None) -> None:
    """Every read of graph_objects looks rows up by id (whichever index serves that), so
    its cost is bounded by the rows asked for; ``page_index`` may serve one keyset page."""
    reads = _graph_object_reads(nodes)
    described = [(n["Node Type"], n.get("Index Name"), n.get("Index Cond")) for n in reads]
    assert reads, described
    for node in reads:
        if page_index is not None and node.get("Index Name") == page_index:
            continue
        assert "(id = " in str(node.get("Index Cond", "")), described


async def test_settle_finds_tasks_and_dependents_by_id(
    db_pool: asyncpg.Pool, fresh_graph: list[asyncpg.Record]
) -> None:
    tasks = fresh_graph
    nodes = await _plan(
        db_pool,
        transitions._SETTLE,
        "2026-01-01T00:00:00Z",
        [uuid.uuid4() for _ in tasks],
        [t["project_id"] for t in tasks],
        [t["id"] for t in tasks],
        [str(uuid.uuid4()) for _ in tasks],
        [t["graph_id"] for t in tasks],
        list(transitions.ENDED),
        True,
    )
    _assert_probes_by_id(nodes)


async def test_unblock_finds_dependents_by_id(
    db_pool: asyncpg.Pool, fresh_graph: list[asyncpg.Record]
) -> None:
    tasks = fresh_graph
    nodes = await _plan(
        db_pool, dependents._UNBLOCK, [t["project_id"] for t in tasks], [t["id"] for t in tasks]
    )
    _assert_probes_by_id(nodes)


async def test_sweep_pages_pending_tasks_and_checks_them_by_id(
    db_pool: asyncpg.Pool, fresh_graph: list[asyncpg.Record]
) -> None:
    cursor = dependents.SweepCursor()
    nodes = await _plan(
        db_pool,
        dependents._SWEEP,
        cursor.project_id,
        cursor.created_at,
        cursor.task_id,
        200,
    )
    _assert_probes_by_id(nodes, page_index="graph_objects_pending_spectasks_idx")
    assert any(
        n.get("Index Name") == "graph_objects_pending_spectasks_idx"
        for n in _graph_object_reads(nodes)
    )
