"""``kb.agent_run_tool_calls``: the statements the executor runs on it outside a step.

The table has no project_id: every statement checks the project through the run (a join on
``kb.agent_runs``), except the deadline sweep's search, which serves every project.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from agentfleet.postgres.rows import from_row

Db = asyncpg.Pool | asyncpg.Connection

_IN_PROJECT = "EXISTS (SELECT 1 FROM kb.agent_runs r WHERE r.id = t.run_id AND r.project_id = $1)"


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCallRow:
    """A row of ``kb.agent_run_tool_calls``, or the columns a statement selects of it."""

    tool_call_id: str
    tool_name: str
    step_number: int
    status: str
    source: str = ""
    input: dict[str, Any] | None = None
    output: dict[str, Any] | None = None
    error: str | None = None
    decided_at: dt.datetime | None = None
    decision_request_id: str | None = None
    decision_digest: str | None = None
    tool_parameters: Any = None
    """The parameter schema the model saw (a held call)."""
    approval_on_deadline: str | None = None


def _calls(rows: Sequence[asyncpg.Record]) -> list[ToolCallRow]:
    return [from_row(ToolCallRow, r) for r in rows]


async def of_run(db: Db, project_id: str, run_id: str) -> list[ToolCallRow]:
    """Every call of the run, in the order they were recorded."""
    rows = await db.fetch(
        """
        SELECT t.tool_call_id, t.tool_name, t.source, t.input, t.step_number, t.status
        FROM kb.agent_run_tool_calls t
        JOIN kb.agent_runs r ON r.id = t.run_id
        WHERE r.project_id = $1 AND t.run_id = $2::uuid
        ORDER BY t.created_at, t.id
        """,
        project_id,
        run_id,
    )
    return _calls(rows)


async def of_step(db: Db, project_id: str, run_id: str, step: int) -> list[ToolCallRow]:
    """The calls of one step of the run, in order."""
    rows = await db.fetch(
        f"""
        SELECT tool_call_id, tool_name, source, input, output, error, status, step_number,
               decided_at
        FROM kb.agent_run_tool_calls t
        WHERE {_IN_PROJECT} AND run_id = $2::uuid AND step_number = $3
        ORDER BY created_at, id
        """,
        project_id,
        run_id,
        step,
    )
    return _calls(rows)


async def lock(
    conn: asyncpg.Connection, project_id: str, run_id: str, tool_call_id: str
) -> ToolCallRow | None:
    """The call, FOR UPDATE."""
    row = await conn.fetchrow(
        f"SELECT * FROM kb.agent_run_tool_calls t WHERE {_IN_PROJECT} AND run_id = $2::uuid "
        "AND tool_call_id = $3 FOR UPDATE",
        project_id,
        run_id,
        tool_call_id,
    )
    return from_row(ToolCallRow, row) if row is not None else None


async def awaiting_ids(conn: asyncpg.Connection, project_id: str, run_id: str) -> list[str]:
    """tool_call_ids of the run's calls still awaiting approval, in order."""
    rows = await conn.fetch(
        f"""
        SELECT tool_call_id FROM kb.agent_run_tool_calls t
        WHERE {_IN_PROJECT} AND run_id = $2::uuid AND status = 'awaiting_approval'
        ORDER BY created_at, id
        """,
        project_id,
        run_id,
    )
    return [r["tool_call_id"] for r in rows]


async def overdue(conn: asyncpg.Connection, project_id: str, run_id: str) -> list[ToolCallRow]:
    """The run's calls awaiting approval past their deadline, in order."""
    rows = await conn.fetch(
        f"""
        SELECT * FROM kb.agent_run_tool_calls t
        WHERE {_IN_PROJECT} AND run_id = $2::uuid AND status = 'awaiting_approval'
          AND approval_deadline <= now()
        ORDER BY created_at, id
        """,
        project_id,
        run_id,
    )
    return _calls(rows)


OVERDUE_RUNS = """
SELECT DISTINCT r.project_id, r.id::text AS run_id
FROM kb.agent_run_tool_calls t JOIN kb.agent_runs r ON r.id = t.run_id
WHERE t.status = 'awaiting_approval' AND t.approval_deadline <= now() AND t.decided_at IS NULL
  AND r.status = 'waiting'
LIMIT $1
"""
"""The approval deadline sweep's search, which every worker runs each tick. ``decided_at IS
NULL`` (true of every awaiting call) lets it read agent_run_tool_calls_awaiting_idx, whose
predicate leaves out status so that a call's result can be a HOT update (migration 0017)."""


async def overdue_runs(db: Db, limit: int) -> list[tuple[str, str]]:
    """(project_id, run_id) of waiting runs with an overdue call, each once: the deadline
    sweep serves every project."""
    rows = await db.fetch(OVERDUE_RUNS, limit)
    return [(r["project_id"], r["run_id"]) for r in rows]


async def decide(
    conn: asyncpg.Connection,
    project_id: str,
    run_id: str,
    tool_call_id: str,
    *,
    status: str,
    decided_by: str,
    reason: str,
    request_id: str | None,
    digest: str | None,
    arguments: dict[str, Any] | None,
    error: str | None,
) -> None:
    """``awaiting_approval -> status`` (approved or rejected; a rejection answers the call
    with ``error``); ``arguments`` replace the model's, which are kept as original_input."""
    await conn.execute(
        f"""
        UPDATE kb.agent_run_tool_calls t
        SET status = $4, decided_at = now(), decided_by = $5, decision_reason = nullif($6, ''),
            decision_request_id = $7, decision_digest = $8,
            original_input = CASE WHEN $9::jsonb IS NULL THEN NULL ELSE input END,
            input = coalesce($9::jsonb, input),
            output = $10::jsonb, error = $11,
            completed_at = CASE WHEN $4 = 'rejected' THEN now() END
        WHERE {_IN_PROJECT} AND run_id = $2::uuid AND tool_call_id = $3
          AND status = 'awaiting_approval'
        """,
        project_id,
        run_id,
        tool_call_id,
        status,
        decided_by,
        reason,
        request_id,
        digest,
        arguments,
        {"error": error} if error is not None else None,
        error,
    )


async def reject_held(
    conn: asyncpg.Connection, project_id: str, run_id: str, why: str
) -> list[ToolCallRow]:
    """The run's held calls (awaiting or approved, never executed) ``rejected`` with ``why``;
    the calls answered."""
    rows = await conn.fetch(
        f"""
        UPDATE kb.agent_run_tool_calls t
        SET status = 'rejected', output = jsonb_build_object('error', $3::text), error = $3,
            completed_at = now(), decided_at = coalesce(decided_at, now()),
            decided_by = coalesce(decided_by, 'cancel')
        WHERE {_IN_PROJECT} AND run_id = $2::uuid AND status IN ('awaiting_approval', 'approved')
        RETURNING tool_call_id, tool_name, step_number, status
        """,
        project_id,
        run_id,
        why,
    )
    return _calls(rows)


def _update_started(set_clause: str, columns: Sequence[tuple[str, str]]) -> str:
    """The statement that updates the run's ``started`` calls ``$3`` from per-call arrays
    ``$4...``: ``columns`` are their (name, type), ``c.<name>`` in ``set_clause``."""
    arrays = ", ".join(f"${n}::{kind}[]" for n, (_, kind) in enumerate(columns, start=4))
    names = ", ".join(name for name, _ in columns)
    return f"""
        UPDATE kb.agent_run_tool_calls t SET {set_clause}
        FROM unnest($3::text[], {arrays}) AS c(id, {names})
        WHERE {_IN_PROJECT} AND t.run_id = $2::uuid AND t.tool_call_id = c.id
          AND t.status = 'started'
        """


_FINISH_STARTED = _update_started(
    "status = c.status, output = c.output, error = nullif(c.error, ''), "
    "duration_ms = c.duration_ms, completed_at = now()",
    [("status", "text"), ("output", "jsonb"), ("error", "text"), ("duration_ms", "bigint")],
)
_HOLD = _update_started(
    "status = 'awaiting_approval', tool_parameters = c.parameters, "
    "approval_on_deadline = c.on_deadline, "
    "approval_deadline = now() + make_interval(secs => c.deadline_s)",
    [("parameters", "jsonb"), ("on_deadline", "text"), ("deadline_s", "double precision")],
)


async def finish_started(
    conn: asyncpg.Connection,
    project_id: str,
    run_id: str,
    results: Sequence[tuple[str, str, Any, str, int | None]],
) -> None:
    """Records the results of ``started`` calls: (tool_call_id, status, output, error,
    duration_ms) each."""
    await conn.execute(_FINISH_STARTED, project_id, run_id, *_columns(results, 5))


async def hold(
    conn: asyncpg.Connection,
    project_id: str,
    run_id: str,
    held: Sequence[tuple[str, dict[str, Any], str, float]],
) -> None:
    """``started -> awaiting_approval``: (tool_call_id, parameter schema, deadline rule,
    deadline in seconds) each."""
    await conn.execute(_HOLD, project_id, run_id, *_columns(held, 4))


def _columns(rows: Sequence[tuple[Any, ...]], width: int) -> list[list[Any]]:
    return [list(column) for column in zip(*rows, strict=True)] if rows else [[]] * width


async def start_approved(
    db: Db, project_id: str, run_id: str, call_ids: Sequence[str]
) -> frozenset[str]:
    """``approved -> started`` for ``call_ids``; the ids that moved (never run twice)."""
    rows = await db.fetch(
        f"""
        UPDATE kb.agent_run_tool_calls t SET status = 'started'
        WHERE {_IN_PROJECT} AND run_id = $2::uuid AND tool_call_id = ANY($3::text[])
          AND status = 'approved'
        RETURNING tool_call_id
        """,
        project_id,
        run_id,
        list(call_ids),
    )
    return frozenset(r["tool_call_id"] for r in rows)


async def set_child_ids(
    conn: asyncpg.Connection,
    project_id: str,
    run_id: str,
    tool_call_id: str,
    child_ids: Sequence[str],
) -> None:
    """Records the runs a call spawned, once (a re-attached batch keeps the first ids)."""
    await conn.execute(
        """
        UPDATE kb.agent_run_tool_calls t SET child_run_ids = $3::uuid[]
        FROM kb.agent_runs r
        WHERE t.run_id = $2::uuid AND t.tool_call_id = $4 AND r.id = t.run_id
          AND r.project_id = $1 AND t.child_run_ids = '{}'
        """,
        project_id,
        run_id,
        list(child_ids),
        tool_call_id,
    )


async def spawned(db: Db, project_id: str, run_id: str, tool_call_id: str) -> bool:
    """Whether the call has spawned its children already."""
    return bool(
        await db.fetchval(
            """
            SELECT cardinality(t.child_run_ids) > 0 FROM kb.agent_run_tool_calls t
            JOIN kb.agent_runs r ON r.id = t.run_id
            WHERE r.project_id = $1 AND t.run_id = $2::uuid AND t.tool_call_id = $3
            """,
            project_id,
            run_id,
            tool_call_id,
        )
    )


async def exited_loop(db: Db, project_id: str, run_id: str) -> bool:
    """Whether the run called ``exit_loop`` successfully."""
    return bool(
        await db.fetchval(
            """
            SELECT EXISTS (
                SELECT 1 FROM kb.agent_run_tool_calls t JOIN kb.agent_runs r ON r.id = t.run_id
                WHERE r.project_id = $1 AND t.run_id = $2::uuid AND t.tool_name = 'exit_loop'
                  AND t.status = 'completed' AND t.error IS NULL)
            """,
            project_id,
            run_id,
        )
    )
