"""agentfleet.testing.checks.invariants on hand-built rows: a healthy database passes, and each rule
catches the one violation made for it (and only its own project's, when asked)."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest

from agentfleet.testing.checks.invariants import assert_invariants, check_invariants

P = "inv"


_CASTS = {
    "lease_expires_at": "now() + ${}::text::interval",
    "parent_run_id": "${}::uuid",
    "root_run_id": "${}::uuid",
}


async def run(pool: asyncpg.Pool, *, project: str = P, **values: Any) -> str:
    """A run row; defaults to a completed top-level run with times set."""
    row: dict[str, Any] = {
        "project_id": project,
        "agent_name": "a",
        "status": "completed",
        "completed_at": "now",
        "duration_ms": 5,
        **values,
    }
    columns, params, args = [], [], []
    for column, value in row.items():
        columns.append(column)
        if value == "now":
            params.append("now()")
            continue
        args.append(value)
        cast = _CASTS.get(column, "${}")
        params.append(cast.format(len(args)))
    sql = (
        f"INSERT INTO kb.agent_runs ({', '.join(columns)}) "
        f"VALUES ({', '.join(params)}) RETURNING id::text"
    )
    return await pool.fetchval(sql, *args)


async def event(
    pool: asyncpg.Pool, run_id: str, seq: int, type_: str, *, count: bool = True, **payload: Any
) -> None:
    """An event row; ``count`` also moves the run's last_event_seq as append_events does."""
    await pool.execute(
        "INSERT INTO kb.agent_run_events (run_id, seq, root_run_id, type, agent_name, payload) "
        "VALUES ($1::uuid, $2, $1::uuid, $3, 'a', $4::jsonb)",
        run_id,
        seq,
        type_,
        payload,
    )
    if count:
        await pool.execute(
            "UPDATE kb.agent_runs SET last_event_seq = greatest(last_event_seq, $2) "
            "WHERE id = $1::uuid",
            run_id,
            seq,
        )


async def message(pool: asyncpg.Pool, run_id: str, seq: int) -> None:
    await pool.execute(
        "INSERT INTO kb.agent_run_messages (run_id, seq, role, agent_name, content) "
        "VALUES ($1::uuid, $2, 'user', 'a', '{}'::jsonb)",
        run_id,
        seq,
    )


async def healthy_run(pool: asyncpg.Pool, project: str = P) -> str:
    run_id = await run(pool, project=project)
    await message(pool, run_id, 0)
    await message(pool, run_id, 1)
    await event(pool, run_id, 1, "run_started")
    await event(pool, run_id, 2, "tool_request", tool_call_id="c1")
    await event(pool, run_id, 3, "tool_response", tool_call_id="c1")
    await event(pool, run_id, 4, "run_finished")
    await pool.execute(
        "INSERT INTO kb.agent_run_tool_calls (run_id, tool_call_id, tool_name, source, status) "
        "VALUES ($1::uuid, 'c1', 't', 'builtin', 'completed')",
        run_id,
    )
    return run_id


def only(violations: list[str], rule: str) -> str:
    assert len(violations) == 1, violations
    assert violations[0].startswith(f"{rule}: "), violations
    return violations[0]


async def test_a_healthy_database_passes(db_pool: asyncpg.Pool) -> None:
    root = await healthy_run(db_pool)
    await run(db_pool, parent_run_id=root, root_run_id=root, depth=1)
    await run(db_pool, status="queued", completed_at=None, duration_ms=None)
    await run(
        db_pool,
        status="running",
        completed_at=None,
        duration_ms=None,
        lease_owner="w",
        lease_expires_at="30 seconds",
    )
    await run(db_pool, status="paused")
    assert await check_invariants(db_pool) == []
    await assert_invariants(db_pool, project_id=P)


@pytest.mark.parametrize("status", ["running", "queued"])
async def test_run_state_catches_an_expired_lease(db_pool: asyncpg.Pool, status: str) -> None:
    run_id = await run(
        db_pool,
        status=status,
        completed_at=None,
        duration_ms=None,
        lease_owner="dead-worker",
        lease_expires_at="-1 second",
    )
    text = only(await check_invariants(db_pool), "run_state")
    assert run_id in text
    assert "dead-worker" in text


async def test_run_state_catches_a_running_run_without_lease(db_pool: asyncpg.Pool) -> None:
    await run(db_pool, status="running", completed_at=None, duration_ms=None)
    only(await check_invariants(db_pool), "run_state")


async def test_tool_pairing_catches_missing_duplicate_and_stray_responses(
    db_pool: asyncpg.Pool,
) -> None:
    unanswered = await run(db_pool)
    await event(db_pool, unanswered, 1, "tool_request", tool_call_id="c1")
    assert "'c1' has 1 TOOL_REQUEST and 0" in only(await check_invariants(db_pool), "tool_pairing")
    await event(db_pool, unanswered, 2, "tool_response", tool_call_id="c1")
    await event(db_pool, unanswered, 3, "tool_response", tool_call_id="c1")
    assert "and 2 TOOL_RESPONSE" in only(await check_invariants(db_pool), "tool_pairing")
    stray = await run(db_pool, project="other")
    await event(db_pool, stray, 1, "tool_response", tool_call_id="c9")
    violations = await check_invariants(db_pool, project_id="other")
    assert "'c9' has 0 TOOL_REQUEST" in only(violations, "tool_pairing")


async def test_tool_pairing_allows_calls_in_flight(db_pool: asyncpg.Pool) -> None:
    running = await run(
        db_pool,
        status="running",
        completed_at=None,
        duration_ms=None,
        lease_owner="w",
        lease_expires_at="30 seconds",
    )
    await event(db_pool, running, 1, "tool_request", tool_call_id="c1")
    assert await check_invariants(db_pool) == []


async def test_event_seq_catches_a_gap(db_pool: asyncpg.Pool) -> None:
    run_id = await run(db_pool)
    await event(db_pool, run_id, 1, "run_started")
    await event(db_pool, run_id, 3, "run_finished")
    assert "seqs 1..3" in only(await check_invariants(db_pool), "event_seq")


async def test_event_counter_catches_an_event_written_around_append_events(
    db_pool: asyncpg.Pool,
) -> None:
    run_id = await run(db_pool)
    await event(db_pool, run_id, 1, "run_started")
    await event(db_pool, run_id, 2, "run_finished", count=False)
    text = only(await check_invariants(db_pool), "event_counter")
    assert "last_event_seq 1 but newest event seq 2" in text


async def test_terminal_times_catch_a_missing_duration(db_pool: asyncpg.Pool) -> None:
    # completed_at is guarded by a CHECK constraint; duration_ms only by the executor.
    await run(db_pool, status="failed", duration_ms=None)
    only(await check_invariants(db_pool), "terminal_times")


@pytest.mark.parametrize("status", ["completed", "paused"])
async def test_terminal_lease_catches_a_lease_kept(db_pool: asyncpg.Pool, status: str) -> None:
    await run(db_pool, status=status, lease_owner="w", lease_expires_at="1 hour")
    only(await check_invariants(db_pool), "terminal_lease")


async def test_open_tool_calls_catch_a_started_row(db_pool: asyncpg.Pool) -> None:
    run_id = await run(db_pool, status="cancelled")
    await db_pool.execute(
        "INSERT INTO kb.agent_run_tool_calls (run_id, tool_call_id, tool_name, source) "
        "VALUES ($1::uuid, 'c1', 'slow', 'builtin')",
        run_id,
    )
    assert "'c1' (slow)" in only(await check_invariants(db_pool), "open_tool_calls")


async def test_run_tree_catches_depth_root_and_project_mismatches(db_pool: asyncpg.Pool) -> None:
    root = await run(db_pool)
    other_root = await run(db_pool)
    await run(db_pool, parent_run_id=root, root_run_id=root, depth=2)
    assert "depth 2" in only(await check_invariants(db_pool), "run_tree")
    await db_pool.execute("DELETE FROM kb.agent_runs WHERE depth = 2")
    await run(db_pool, parent_run_id=root, root_run_id=other_root, depth=1)
    only(await check_invariants(db_pool), "run_tree")
    await db_pool.execute("DELETE FROM kb.agent_runs WHERE depth = 1")
    foreign_parent = await run(db_pool, project="other")
    await run(db_pool, parent_run_id=foreign_parent, root_run_id=foreign_parent, depth=1)
    violations = await check_invariants(db_pool, project_id=P)
    assert "project other" in only(violations, "run_tree")


async def test_message_seq_catches_a_gap(db_pool: asyncpg.Pool) -> None:
    run_id = await run(db_pool)
    await message(db_pool, run_id, 0)
    await message(db_pool, run_id, 2)
    only(await check_invariants(db_pool), "message_seq")


async def test_project_filter_and_assert(db_pool: asyncpg.Pool) -> None:
    await healthy_run(db_pool)
    broken = await run(db_pool, project="other", duration_ms=None)
    assert await check_invariants(db_pool, project_id=P) == []
    with pytest.raises(AssertionError) as caught:
        await assert_invariants(db_pool)
    assert broken in str(caught.value)
    assert "1 database invariant(s) violated" in str(caught.value)


async def test_graph_status_catches_a_status_kept_wrong(db_pool: asyncpg.Pool) -> None:
    graph_id = await db_pool.fetchval(
        "INSERT INTO kb.graph_objects (project_id, type, properties)"
        " VALUES ($1, 'TaskGraph', '{\"status\": \"active\"}') RETURNING id::text",
        P,
    )
    await db_pool.execute(
        "INSERT INTO kb.graph_objects (project_id, type, properties)"
        " VALUES ($1, 'SpecTask', jsonb_build_object('status', 'completed', 'graph_id', $2::text))",
        P,
        graph_id,
    )
    assert await check_invariants(db_pool) == []
    await db_pool.execute("UPDATE kb.task_graph_states SET status = 'failed'")
    text = only(await check_invariants(db_pool), "graph_status")
    assert text.endswith(f"task graph {graph_id}: status kept as failed but derived completed")
