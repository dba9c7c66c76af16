"""Decisions on tool calls that wait for approval (issue #19): SQL over
``kb.agent_run_tool_calls`` and ``kb.agent_runs``, one transaction per decision.

- :func:`decide_tool_call` (DecideToolCall): ``awaiting_approval -> approved | rejected``;
  a rejected call is answered at once (row output + TOOL_RESPONSE with the reason) and is
  never executed. When no call of the run waits any more, the run goes ``waiting ->
  queued`` (its waiting time added to ``waited_ms``) and the workers are woken.
- :func:`expire_overdue_approvals`: the deadline sweep, run on every worker's claim tick:
  overdue calls are rejected, or their run fails, as their rule says.
- :func:`answer_held_calls`: CancelRun of a waiting run answers its held calls.

The run row is locked first in every transaction (``FOR UPDATE``), which also orders the
run's event appenders.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import asyncpg
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, ValidationError

from agentfleet import events
from agentfleet.db import notify
from agentfleet.errors import FailedPrecondition, InvalidArgument, NotFound

QUEUED_CHANNEL = "agentfleet_runs_queued"
"""Mirrors ``services.executor.queue.QUEUED_CHANNEL`` (that module imports this one)."""
DEADLINE_DECIDER = "deadline"
SWEEP_BATCH = 100

_LOCK_RUN = "SELECT * FROM kb.agent_runs WHERE project_id = $1 AND id = $2::uuid FOR UPDATE"
_LOCK_CALL = """
SELECT * FROM kb.agent_run_tool_calls WHERE run_id = $1::uuid AND tool_call_id = $2
FOR UPDATE
"""
_WAITING_CALLS = """
SELECT tool_call_id FROM kb.agent_run_tool_calls
WHERE run_id = $1::uuid AND status = 'awaiting_approval'
ORDER BY created_at, id
"""
_DECIDE = """
UPDATE kb.agent_run_tool_calls
SET status = $3, decided_at = now(), decided_by = $4, decision_reason = nullif($5, ''),
    decision_request_id = $6, decision_digest = $7,
    original_input = CASE WHEN $8::jsonb IS NULL THEN NULL ELSE input END,
    input = coalesce($8::jsonb, input),
    output = $9::jsonb, error = $10, completed_at = CASE WHEN $3 = 'rejected' THEN now() END
WHERE run_id = $1::uuid AND tool_call_id = $2 AND status = 'awaiting_approval'
"""
_REQUEUE = """
UPDATE kb.agent_runs
SET status = 'queued',
    waited_ms = waited_ms + greatest(0, (extract(epoch FROM clock_timestamp() - waiting_since)
                                         * 1000)::bigint),
    waiting_since = NULL
WHERE id = $1::uuid AND status = 'waiting'
RETURNING *
"""
_FAIL_WAITING = """
UPDATE kb.agent_runs
SET status = 'failed', error_message = $2, completed_at = now(), waiting_since = NULL,
    duration_ms = greatest(0, (extract(epoch FROM clock_timestamp()
                                       - coalesce(started_at, created_at)) * 1000)::bigint)
WHERE id = $1::uuid AND status = 'waiting'
RETURNING *
"""
# Overdue calls of waiting runs, each run once; SKIP LOCKED lets several workers sweep.
_OVERDUE = """
SELECT DISTINCT r.project_id, r.id::text AS run_id
FROM kb.agent_run_tool_calls t JOIN kb.agent_runs r ON r.id = t.run_id
WHERE t.status = 'awaiting_approval' AND t.approval_deadline <= now()
  AND r.status = 'waiting'
LIMIT $1
"""


@dataclass(frozen=True, kw_only=True, slots=True)
class Decision:
    """What DecideToolCall asks (validated)."""

    project_id: str
    run_id: str
    tool_call_id: str
    approve: bool
    reason: str = ""
    arguments: dict[str, Any] | None = None
    """Edited arguments of an approval; None = the model's."""
    request_id: str | None = None
    decided_by: str = ""
    """Token id of the person (or ``"auth-off"``)."""

    def digest(self) -> str:
        """What the request asked, so a replayed request_id with other content is caught."""
        body = json.dumps(
            [self.tool_call_id, self.approve, self.reason, self.arguments], sort_keys=True
        )
        return hashlib.sha256(body.encode()).hexdigest()


@dataclass(frozen=True, kw_only=True, slots=True)
class DecisionOutcome:
    """The run and call after a decision (or a replayed one)."""

    run: dict[str, Any]
    """The run row."""
    call_status: str
    waiting: list[str]
    """tool_call_ids of the run still waiting."""
    stored: list[events.PersistedEvent]
    """Events to publish in-process."""


async def decide_tool_call(pool: asyncpg.Pool, decision: Decision) -> DecisionOutcome:
    """Approves or rejects one waiting call; see the module docstring. NotFound,
    FailedPrecondition (already decided / run not waiting), InvalidArgument (request_id
    reused for another decision, arguments not valid for the tool)."""
    async with pool.acquire() as conn, conn.transaction():
        run = await conn.fetchrow(_LOCK_RUN, decision.project_id, decision.run_id)
        if run is None:
            raise NotFound(f"run {decision.run_id} not found in project {decision.project_id!r}")
        call = await conn.fetchrow(_LOCK_CALL, decision.run_id, decision.tool_call_id)
        if call is None:
            raise NotFound(f"tool call {decision.tool_call_id!r} not found in run {run['id']}")
        if decision.request_id is not None and call["decision_request_id"] == decision.request_id:
            if call["decision_digest"] != decision.digest():
                raise InvalidArgument.for_field(
                    "request_id", "was already used for a different decision of this call"
                )
            waiting = [r["tool_call_id"] for r in await conn.fetch(_WAITING_CALLS, run["id"])]
            return DecisionOutcome(
                run=dict(run), call_status=call["status"], waiting=waiting, stored=[]
            )
        if call["status"] != "awaiting_approval":
            raise FailedPrecondition(
                f"tool call {decision.tool_call_id!r} is {call['status']}, not awaiting "
                "approval: it was decided already"
            )
        if run["status"] != "waiting":
            raise FailedPrecondition(f"run {run['id']} is {run['status']}, not waiting")
        if decision.arguments is not None:
            _check_arguments(decision.arguments, call["tool_parameters"])
        status, why, batch = _decision_effects(run, call, decision)
        await conn.execute(
            _DECIDE,
            decision.run_id,
            decision.tool_call_id,
            status,
            decision.decided_by,
            decision.reason,
            decision.request_id,
            decision.digest(),
            decision.arguments,
            {"error": why} if why is not None else None,
            why,
        )
        waiting = [r["tool_call_id"] for r in await conn.fetch(_WAITING_CALLS, run["id"])]
        current = dict(run)
        if not waiting:
            current = dict(await conn.fetchrow(_REQUEUE, run["id"]))
            batch.append(_status_changed(run, "waiting", "queued", "every held call decided"))
            await notify(conn, QUEUED_CHANNEL, str(run["id"]))
        stored = await _append(conn, run, batch)
    return DecisionOutcome(run=current, call_status=status, waiting=waiting, stored=stored)


def _decision_effects(
    run: asyncpg.Record, call: asyncpg.Record, decision: Decision
) -> tuple[str, str | None, list[events.RunEvent]]:
    """The call's new status, the error the model will read (rejections), the events."""
    if decision.approve:
        return "approved", None, []
    why = f"rejected by a person: {decision.reason}"
    return "rejected", why, [_rejection(run["agent_name"], call, why)]


def _rejection(agent_name: str, call: asyncpg.Record, why: str) -> events.ToolResponse:
    """The TOOL_RESPONSE of a held call answered ``why`` instead of being executed."""
    return events.ToolResponse(
        agent_name=agent_name,
        tool_call_id=call["tool_call_id"],
        tool_name=call["tool_name"],
        status="rejected",
        result={"error": why},
        error=why,
        step=call["step_number"],
    )


def _status_changed(run: asyncpg.Record, before: str, after: str, why: str) -> events.RunEvent:
    return events.StatusChanged(
        agent_name=run["agent_name"],
        from_status=before,  # type: ignore[arg-type]
        to_status=after,  # type: ignore[arg-type]
        reason=why,
    )


def _check_arguments(arguments: dict[str, Any], schema: Any) -> None:
    """Edited arguments must fit the parameter schema the model saw for the tool."""
    if not isinstance(schema, dict):
        return
    try:
        Draft202012Validator(schema).validate(arguments)
    except ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path)
        raise InvalidArgument.for_field(
            f"arguments{'.' + where if where else ''}",
            f"does not fit the tool's parameter schema: {exc.message}",
        ) from exc
    except SchemaError:  # the tool's own schema is broken: nothing to hold edits to
        return


async def answer_held_calls(
    conn: asyncpg.Connection, run_id: str, agent_name: str, why: str
) -> list[events.RunEvent]:
    """Marks the run's held calls (awaiting or approved, never executed) ``rejected`` with
    ``why``; their TOOL_RESPONSEs, for the caller to append in its transaction."""
    rows = await conn.fetch(
        """
        UPDATE kb.agent_run_tool_calls
        SET status = 'rejected', output = jsonb_build_object('error', $2::text), error = $2,
            completed_at = now(), decided_at = coalesce(decided_at, now()),
            decided_by = coalesce(decided_by, 'cancel')
        WHERE run_id = $1::uuid AND status IN ('awaiting_approval', 'approved')
        RETURNING tool_call_id, tool_name, step_number
        """,
        run_id,
        why,
    )
    return [_rejection(agent_name, r, why) for r in rows]


async def expire_overdue_approvals(pool: asyncpg.Pool) -> list[events.PersistedEvent]:
    """Applies the deadline of every overdue waiting call (at most :data:`SWEEP_BATCH` runs
    per tick): ``reject`` answers the call like a person's rejection; ``fail`` answers all
    held calls of the run and fails it. Returns the events to publish."""
    overdue = await pool.fetch(_OVERDUE, SWEEP_BATCH)
    stored: list[events.PersistedEvent] = []
    for row in overdue:
        stored += await _expire_run(pool, row["project_id"], row["run_id"])
    return stored


async def _expire_run(
    pool: asyncpg.Pool, project_id: str, run_id: str
) -> list[events.PersistedEvent]:
    async with pool.acquire() as conn, conn.transaction():
        run = await conn.fetchrow(_LOCK_RUN + " SKIP LOCKED", project_id, run_id)
        if run is None or run["status"] != "waiting":
            return []  # another worker (or a person) got there first
        calls = await conn.fetch(
            """
            SELECT * FROM kb.agent_run_tool_calls
            WHERE run_id = $1::uuid AND status = 'awaiting_approval'
              AND approval_deadline <= now()
            ORDER BY created_at, id
            """,
            run_id,
        )
        if not calls:
            return []
        fail = next((c for c in calls if c["approval_on_deadline"] == "fail"), None)
        if fail is not None:
            message = (
                f"approval deadline passed: tool call {fail['tool_call_id']!r} "
                f"({fail['tool_name']}) was not decided in time"
            )
            batch = await answer_held_calls(
                conn, run_id, run["agent_name"], f"not executed: {message}"
            )
            finished = await conn.fetchrow(_FAIL_WAITING, run_id, message)
            batch += [
                _deadline_event(run, message, calls),
                _status_changed(run, "waiting", "failed", "approval deadline"),
                events.RunFinished(
                    agent_name=run["agent_name"], run=events.run_snapshot(dict(finished))
                ),
            ]
            return await _append(conn, run, batch)
        batch = [_deadline_event(run, "approval deadline passed: call rejected", calls)]
        for call in calls:
            why = "rejected: nobody decided before the approval deadline"
            await conn.execute(
                _DECIDE,
                run_id,
                call["tool_call_id"],
                "rejected",
                DEADLINE_DECIDER,
                "approval deadline passed",
                None,
                None,
                None,
                {"error": why},
                why,
            )
            batch.append(_rejection(run["agent_name"], call, why))
        if not await conn.fetch(_WAITING_CALLS, run_id):
            await conn.fetchrow(_REQUEUE, run_id)
            batch.append(_status_changed(run, "waiting", "queued", "approval deadline"))
            await notify(conn, QUEUED_CHANNEL, run_id)
        return await _append(conn, run, batch)


def _deadline_event(
    run: asyncpg.Record, message: str, calls: list[asyncpg.Record]
) -> events.RunEvent:
    return events.Safety(
        agent_name=run["agent_name"],
        kind="approval_deadline",
        message=message,
        details={"tool_call_ids": [c["tool_call_id"] for c in calls]},
        step=max(c["step_number"] for c in calls),
    )


async def _append(
    conn: asyncpg.Connection, run: asyncpg.Record, batch: list[events.RunEvent]
) -> list[events.PersistedEvent]:
    return await events.append_events(
        conn,
        project_id=run["project_id"],
        run_id=str(run["id"]),
        root_run_id=str(run["root_run_id"]),
        events=batch,
    )
