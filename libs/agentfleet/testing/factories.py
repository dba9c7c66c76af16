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
    row = await db.fetchrow(
        """
        INSERT INTO kb.agent_definitions
            (project_id, name, description, system_prompt, model, tools, flow_type, visibility)
        VALUES ($1, $2, $3, 'You are a test agent.', $4, $5, $6, $7)
        RETURNING *
        """,
        project_id,
        name or f"agent-{next(_names)}",
        description,
        {"provider": "google", "name": model_name},
        list(tools),
        flow_type,
        visibility,
    )
    return dict(row)


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
    created = created_at
    started = completed = None
    stopped = status in (*_TERMINAL, "paused")
    if status != "queued":
        started = (created_at or datetime.now().astimezone()) + timedelta(milliseconds=5)
    if stopped and duration_ms is not None and started is not None:
        completed = started + timedelta(milliseconds=duration_ms)
    row = await db.fetchrow(
        """
        INSERT INTO kb.agent_runs
            (project_id, agent_name, agent_definition_id, status, input, summary,
             error_message, parent_run_id, root_run_id, depth, step_count, total_steps,
             resume_count, tokens_in, tokens_out, tokens_total_tree, trace_id, labels,
             created_at, started_at, completed_at, duration_ms)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11, $12, $13, $14, $15, $16,
                $17, coalesce($18, now()), $19, $20, $21)
        RETURNING *
        """,
        project_id,
        agent_name,
        agent_definition_id,
        status,
        input,
        summary if summary is not None else ("done: " + input if status == "completed" else None),
        error_message if error_message is not None else ("boom" if status == "failed" else None),
        parent["id"] if parent else None,
        parent["root_run_id"] if parent else None,
        parent["depth"] + 1 if parent else 0,
        step_count,
        resume_count,
        tokens_in,
        tokens_out,
        tokens_total_tree if tokens_total_tree is not None else tokens_in + tokens_out,
        secrets.token_hex(16),
        labels or {},
        created,
        started,
        completed if stopped else None,
        duration_ms if stopped else None,
    )
    return dict(row)


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
    row = await db.fetchrow(
        """
        INSERT INTO kb.agent_run_messages
            (run_id, seq, step_number, role, agent_name, content, tokens, is_internal)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
        RETURNING *
        """,
        run["id"],
        seq,
        step,
        role,
        run["agent_name"],
        {"role": gemini_role, "parts": parts},
        tokens,
        is_internal,
    )
    return dict(row)


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
    row = await db.fetchrow(
        """
        INSERT INTO kb.agent_run_tool_calls
            (run_id, message_id, tool_call_id, step_number, tool_name, source, input, output,
             status, error, child_run_ids, duration_ms, completed_at)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12,
                CASE WHEN $13 THEN now() END)
        RETURNING *
        """,
        run["id"],
        message_id,
        tool_call_id,
        step,
        tool_name,
        source,
        input if input is not None else {"query": "q"},
        (output if output is not None else {"result": "ok"}) if finished else None,
        status,
        error,
        list(child_run_ids),
        duration_ms if finished else None,
        finished,
    )
    return dict(row)


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
