"""Old finished history for bench/prune.py, built fast by set-based SQL: one template run
written by the test factories as the executor would, then copied R times by
``generate_series`` (each copy with its own ids, project and completion time), in chunks of
:data:`CHUNK` runs on two connections."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from agentfleet.postgres import db
from agentfleet.testing import factories as f

MAIN, OTHER = "bench", "other"
"""Every tenth built run is the other project's."""
OLD_AGE = "40 days"
"""Every built old run completed at least this long ago: past both retentions."""
CHUNK = 50_000
"""Runs one build statement writes (its four tables), one transaction per chunk."""
HISTORY_TABLES = (
    "kb.agent_runs",
    "kb.agent_run_messages",
    "kb.agent_run_tool_calls",
    "kb.agent_run_events",
    "kb.agent_run_resume_requests",
)

# Each built run copies the template's rows column by column; these columns get the run's
# own values (``t`` is the template row, ``n`` the run: n.i, n.id, n.project, n.at).
OVERRIDES: dict[str, dict[str, str]] = {
    "kb.agent_runs": {
        "id": "n.id",
        "root_run_id": "n.id",
        "project_id": "n.project",
        "input": "'task number ' || n.i",
        "trace_id": "md5('trace' || n.i)",
        "created_at": "n.at - interval '2 seconds'",
        "started_at": "n.at - interval '1995 milliseconds'",
        "completed_at": "n.at",
    },
    "kb.agent_run_messages": {
        "id": "md5(n.id::text || t.seq)::uuid",
        "run_id": "n.id",
        "created_at": "n.at - interval '1 second'",
    },
    "kb.agent_run_tool_calls": {
        "id": "md5(n.id::text || 'call')::uuid",
        "run_id": "n.id",
        "message_id": "md5(n.id::text || 1)::uuid",
        "created_at": "n.at - interval '1 second'",
        "completed_at": "n.at - interval '900 milliseconds'",
    },
    "kb.agent_run_events": {
        "run_id": "n.id",
        "root_run_id": "n.id",
        "created_at": "n.at - interval '1 second'",
    },
}


async def template_run(conn: Any) -> dict[str, Any]:
    """One finished run with a one-tool step, written by the factories as the executor
    would; the rows every built run copies."""
    run = await f.insert_run(conn, project_id=MAIN, agent_name="researcher", step_count=1)
    await f.insert_message(conn, run=run, seq=0, role="user", text="find the thing", step=0)
    model = await f.insert_message(
        conn,
        run=run,
        seq=1,
        role="model",
        text="looking",
        function_calls=[("search_fts", {"query": "q1"})],
        step=1,
        tokens=40,
    )
    await f.insert_message(
        conn,
        run=run,
        seq=2,
        role="tool",
        text=None,
        function_responses=[("search_fts", {"hits": [1, 2, 3]})],
        step=1,
    )
    await f.insert_tool_call(conn, run=run, tool_call_id="c1-0", message_id=model["id"])
    steps = f.step_events(run, step=1, tool_call_id="c1-0")
    await f.append(conn, run=run, events=[*steps, *f.finish_events(run)])
    return run


async def copy_statements(conn: Any) -> list[str]:
    """INSERT ... SELECT of the template's rows for runs $1..$2 made $3 + n seconds before
    now, ids salted with $4, every column copied but the overridden ones."""
    statements = []
    for table, overrides in OVERRIDES.items():
        schema, name = table.split(".")
        columns = [
            r["column_name"]
            for r in await conn.fetch(
                "SELECT column_name FROM information_schema.columns "
                "WHERE table_schema = $1 AND table_name = $2 AND is_generated = 'NEVER' "
                "ORDER BY ordinal_position",
                schema,
                name,
            )
        ]
        key = "id" if table == "kb.agent_runs" else "run_id"
        values = ", ".join(overrides.get(c, f"t.{c}") for c in columns)
        statements.append(
            f"INSERT INTO {table} ({', '.join(columns)}) SELECT {values} FROM ("
            f"  SELECT i, md5($4::text || i)::uuid AS id,"
            f"    CASE WHEN i % 10 = 0 THEN '{OTHER}' ELSE '{MAIN}' END AS project,"
            f"    now() - $3::text::interval - i * interval '1 second' AS at"
            f"  FROM generate_series($1::bigint, $2::bigint) i) n"
            f" CROSS JOIN {table} t WHERE t.{key} = $5::uuid"
        )
    return statements


async def build(url: str, runs: int, kept: int) -> dict[str, Any]:
    """R old runs and ``kept`` recent ones, in chunks on two connections (two cores)."""
    began = time.perf_counter()
    conn = await db.connect(url)
    try:
        tpl = await template_run(conn)
        statements = await copy_statements(conn)
    finally:
        await conn.close()
    jobs = [("old", lo, min(lo + CHUNK - 1, runs), OLD_AGE) for lo in range(1, runs + 1, CHUNK)]
    jobs.append(("kept", 1, kept, "1 day"))

    async def worker() -> None:
        conn = await db.connect(url)
        try:
            while jobs:
                salt, lo, hi, age = jobs.pop()
                async with conn.transaction():
                    for sql in statements:
                        await conn.execute(sql, lo, hi, age, salt, tpl["id"])
        finally:
            await conn.close()

    await asyncio.gather(worker(), worker())
    conn = await db.connect(url)
    try:
        await conn.execute("DELETE FROM kb.agent_runs WHERE id = $1", tpl["id"])
        # What autovacuum and the checkpointer would do next, done now so that neither
        # writes out the build inside a timed span.
        for table in HISTORY_TABLES:
            await conn.execute(f"VACUUM ANALYZE {table}")
        await conn.execute("CHECKPOINT")
    finally:
        await conn.close()
    return {"seconds": time.perf_counter() - began}


async def table_sizes(conn: Any) -> dict[str, int]:
    """Bytes of each history table, its indexes and TOAST included."""
    rows = await conn.fetch(
        "SELECT t, pg_total_relation_size(t::regclass)::bigint AS size FROM unnest($1::text[]) t",
        list(HISTORY_TABLES),
    )
    return {r["t"]: int(r["size"]) for r in rows}


async def history_size(conn: Any) -> tuple[int, int, int]:
    """Bytes of the history tables (indexes and TOAST included), steps and runs stored."""
    size = sum((await table_sizes(conn)).values())
    steps, count = await conn.fetchrow(
        "SELECT sum(step_count)::bigint, count(*) FROM kb.agent_runs"
    )
    return int(size), int(steps or 0), int(count)
