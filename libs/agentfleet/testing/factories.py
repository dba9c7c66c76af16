"""Rows for tests: agent definitions, runs, messages, tool calls and events, inserted directly.

They write what the executor would write (same columns, same shapes: Gemini ``Content`` JSON
for messages, ``builtin`` / ``mcp:<server>`` / ``executor`` tool sources, events through
:func:`agentfleet.events.append_events` so seqs are real), so history can be tested without
an executor. Every helper takes a connection or pool and returns the inserted row as a dict.
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import asyncpg

from agentfleet import events as ev

Executor = asyncpg.Connection | asyncpg.Pool

_TERMINAL = ("completed", "failed", "cancelled")
_names = itertools.count(1)


async def _insert(db: Executor, table: str, values: dict[str, Any], **sql: str) -> dict[str, Any]:
    """Inserts ``values`` (column: value) as one row of ``table``; returns the row as a dict.

    ``sql`` puts a column's parameter in an SQL expression (``{}`` stands for it), for the
    values the database itself supplies (``now()``)."""
    placeholders = [sql.get(column, "{}").format(f"${n}") for n, column in enumerate(values, 1)]
    row = await db.fetchrow(
        f"INSERT INTO {table} ({', '.join(values)}) VALUES ({', '.join(placeholders)}) RETURNING *",
        *values.values(),
    )
    return dict(row)


async def insert_agent_definition(
    db: Executor,
    *,
    project_id: str,
    name: str | None = None,
    description: str = "a test agent",
    visibility: str = "project",
    tools: Sequence[str] = ("search_fts",),
    model_name: str = "gemini-2.5-flash",
    flow_type: str = "single",
) -> dict[str, Any]:
    """An agent definition (``visibility`` external, project or internal)."""
    return await _insert(
        db,
        "kb.agent_definitions",
        {
            "project_id": project_id,
            "name": name or f"agent-{next(_names)}",
            "description": description,
            "system_prompt": "You are a test agent.",
            "model": {"provider": "google", "name": model_name},
            "tools": list(tools),
            "flow_type": flow_type,
            "visibility": visibility,
        },
    )


async def insert_run(
    db: Executor,
    *,
    project_id: str,
    agent_name: str,
    agent_definition_id: Any = None,
    status: str = "completed",
    input: str = "do the thing",
    parent: dict[str, Any] | None = None,
    created_at: datetime | None = None,
    duration_ms: int | None = 1000,
    step_count: int = 2,
    resume_count: int = 0,
    tokens_in: int = 100,
    tokens_out: int = 20,
    tokens_total_tree: int | None = None,
    summary: str | None = None,
    error_message: str | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A run; ``parent`` (a row from here) makes it a child one level deeper in its tree.

    Stopped runs (terminal or paused) get started_at/completed_at ``duration_ms`` apart.
    """
    started = completed = None
    stopped = status in (*_TERMINAL, "paused")
    if status != "queued":
        started = (created_at or datetime.now().astimezone()) + timedelta(milliseconds=5)
    if stopped and duration_ms is not None and started is not None:
        completed = started + timedelta(milliseconds=duration_ms)
    if summary is None and status == "completed":
        summary = "done: " + input
    if error_message is None and status == "failed":
        error_message = "boom"
    if tokens_total_tree is None:
        tokens_total_tree = tokens_in + tokens_out
    return await _insert(
        db,
        "kb.agent_runs",
        {
            "project_id": project_id,
            "agent_name": agent_name,
            "agent_definition_id": agent_definition_id,
            "status": status,
            "input": input,
            "summary": summary,
            "error_message": error_message,
            "parent_run_id": parent["id"] if parent else None,
            "root_run_id": parent["root_run_id"] if parent else None,
            "depth": parent["depth"] + 1 if parent else 0,
            "step_count": step_count,
            "total_steps": step_count,
            "resume_count": resume_count,
            "tokens_in": tokens_in,
            "tokens_out": tokens_out,
            "tokens_total_tree": tokens_total_tree,
            "trace_id": secrets.token_hex(16),
            "labels": labels or {},
            "created_at": created_at,
            "started_at": started,
            "completed_at": completed if stopped else None,
            "duration_ms": duration_ms if stopped else None,
        },
        created_at="coalesce({}, now())",
    )


async def insert_leased_run(
    db: Executor, *, owner: str, lease: str = "1 hour", **run: Any
) -> dict[str, Any]:
    """A ``running`` run (:func:`insert_run` with ``run``) whose lease ``owner`` holds for
    ``lease`` (an SQL interval), as a worker executing it would: what a test of the executor's
    writes starts from."""
    row = await insert_run(db, status="running", **run)
    leased = await db.fetchrow(
        "UPDATE kb.agent_runs SET lease_owner = $2, lease_expires_at = now() + $3::text::interval"
        " WHERE id = $1 RETURNING *",
        row["id"],
        owner,
        lease,
    )
    return dict(leased)


async def insert_message(
    db: Executor,
    *,
    run: dict[str, Any],
    seq: int,
    role: str = "model",
    text: str | None = "hello",
    function_calls: Sequence[tuple[str, dict[str, Any]]] = (),
    function_responses: Sequence[tuple[str, dict[str, Any]]] = (),
    step: int = 0,
    tokens: int = 0,
    is_internal: bool = False,
) -> dict[str, Any]:
    """A conversation message whose content is a Gemini ``Content`` as JSON."""
    parts: list[dict[str, Any]] = []
    if text is not None:
        parts.append({"text": text})
    parts += [{"function_call": {"name": n, "args": a}} for n, a in function_calls]
    parts += [{"function_response": {"name": n, "response": r}} for n, r in function_responses]
    gemini_role = {"model": "model", "tool": "user"}.get(role, "user")
    return await _insert(
        db,
        "kb.agent_run_messages",
        {
            "run_id": run["id"],
            "seq": seq,
            "step_number": step,
            "role": role,
            "agent_name": run["agent_name"],
            "content": {"role": gemini_role, "parts": parts},
            "tokens": tokens,
            "is_internal": is_internal,
        },
    )


async def insert_tool_call(
    db: Executor,
    *,
    run: dict[str, Any],
    tool_call_id: str,
    tool_name: str = "search_fts",
    source: str = "builtin",
    input: dict[str, Any] | None = None,
    output: dict[str, Any] | None = None,
    status: str = "completed",
    error: str | None = None,
    step: int = 1,
    duration_ms: int | None = 12,
    message_id: Any = None,
    child_run_ids: Sequence[Any] = (),
) -> dict[str, Any]:
    """A tool call row; a ``started`` one has no output, duration or completion time."""
    finished = status != "started"
    return await _insert(
        db,
        "kb.agent_run_tool_calls",
        {
            "run_id": run["id"],
            "message_id": message_id,
            "tool_call_id": tool_call_id,
            "step_number": step,
            "tool_name": tool_name,
            "source": source,
            "input": input if input is not None else {"query": "q"},
            "output": (output if output is not None else {"result": "ok"}) if finished else None,
            "status": status,
            "error": error,
            "child_run_ids": list(child_run_ids),
            "duration_ms": duration_ms if finished else None,
            "completed_at": finished,
        },
        completed_at="CASE WHEN {} THEN now() END",
    )


async def append(
    db: Executor, *, run: dict[str, Any], events: Sequence[ev.RunEvent]
) -> list[ev.PersistedEvent]:
    """Appends events to ``run`` through :func:`agentfleet.events.append_events`."""
    if isinstance(db, asyncpg.Pool):
        async with db.acquire() as conn:
            return await append(conn, run=run, events=events)
    return await ev.append_events(
        db,
        project_id=run["project_id"],
        run_id=str(run["id"]),
        root_run_id=str(run["root_run_id"]),
        events=events,
    )


def step_events(run: dict[str, Any], *, step: int, tool_call_id: str) -> list[ev.RunEvent]:
    """The events of one step with one tool call: text, request, response."""
    agent = run["agent_name"]
    return [
        ev.ModelText(agent_name=agent, text=f"thinking about step {step}", step=step),
        ev.ToolRequest(
            agent_name=agent,
            tool_call_id=tool_call_id,
            tool_name="search_fts",
            arguments={"query": f"q{step}"},
            step=step,
            source="builtin",
        ),
        ev.ToolResponse(
            agent_name=agent,
            tool_call_id=tool_call_id,
            tool_name="search_fts",
            status="completed",
            result={"hits": [step]},
            duration_ms=7,
            step=step,
        ),
    ]


def start_events(run: dict[str, Any]) -> list[ev.RunEvent]:
    """RUN_QUEUED, STATUS_CHANGED queued -> running, RUN_STARTED."""
    agent = run["agent_name"]
    return [
        ev.RunQueued(agent_name=agent, run=ev.run_snapshot({**run, "status": "queued"})),
        ev.StatusChanged(
            agent_name=agent, from_status="queued", to_status="running", reason="claimed"
        ),
        ev.RunStarted(agent_name=agent, model_name="gemini-2.5-flash", tool_names=("search_fts",)),
    ]


def finish_events(run: dict[str, Any], *, status: str = "completed") -> list[ev.RunEvent]:
    """STATUS_CHANGED running -> ``status`` and the terminal RUN_FINISHED."""
    agent = run["agent_name"]
    return [
        ev.StatusChanged(agent_name=agent, from_status="running", to_status=status),  # type: ignore[arg-type]
        ev.RunFinished(agent_name=agent, run=ev.run_snapshot({**run, "status": status})),
    ]
