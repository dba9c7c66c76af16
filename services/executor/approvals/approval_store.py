"""Decisions on tool calls that wait for approval (issue #19): over
:mod:`~services.executor.store.tool_calls` and :mod:`~services.executor.store.runs`, one
transaction per decision.

- :func:`decide_tool_call` (DecideToolCall): ``awaiting_approval -> approved | rejected``;
  a rejected call is answered at once (row output + TOOL_RESPONSE with the reason) and is
  never executed. When no call of the run waits any more, the run goes ``waiting ->
  queued`` (its waiting time added to ``waited_ms``) and the workers are woken.
- :func:`expire_overdue_approvals`: the deadline sweep, run by every worker's claims (at
  most once a second, :data:`~services.executor.queue.APPROVAL_SWEEP_INTERVAL_S`): overdue
  calls are rejected, or their run fails, as their rule says.
- :func:`answer_held_calls`: CancelRun of a waiting run answers its held calls.

The run row is locked first in every transaction (``FOR UPDATE``), which also orders the
run's event appenders.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import asyncpg

from agentfleet import events
from agentfleet.bounded.schema_pool import SchemaCheckTimeout, schema_pool
from agentfleet.errors import FailedPrecondition, InvalidArgument, NotFound
from agentfleet.postgres.db import notify
from agentfleet.request_ids import check_same_request, request_fingerprint
from services.executor.runs import RunRecord, append_run_events
from services.executor.store import runs, tool_calls
from services.executor.store.runs import QUEUED_CHANNEL
from services.executor.store.tool_calls import ToolCallRow

DEADLINE_DECIDER = "deadline"
SWEEP_BATCH = 100


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
        return request_fingerprint([self.tool_call_id, self.approve, self.reason, self.arguments])


@dataclass(frozen=True, kw_only=True, slots=True)
class DecisionOutcome:
    """The run and call after a decision (or a replayed one)."""

    run: RunRecord
    call_status: str
    waiting: list[str]
    """tool_call_ids of the run still waiting."""
    stored: list[events.PersistedEvent]
    """Events to publish in-process."""


async def decide_tool_call(pool: asyncpg.Pool, decision: Decision) -> DecisionOutcome:
    """Approves or rejects one waiting call; see the module docstring. NotFound,
    FailedPrecondition (already decided / run not waiting), InvalidArgument (request_id
    reused for another decision, arguments not valid for the tool)."""
    project_id, run_id = decision.project_id, decision.run_id
    async with pool.acquire() as conn, conn.transaction():
        run = await runs.find(conn, project_id, run_id, lock="lock")
        if run is None:
            raise NotFound(f"run {run_id} not found in project {project_id!r}")
        call = await tool_calls.lock(conn, project_id, run_id, decision.tool_call_id)
        if call is None:
            raise NotFound(f"tool call {decision.tool_call_id!r} not found in run {run.id}")
        if decision.request_id is not None and call.decision_request_id == decision.request_id:
            check_same_request(call.decision_digest, decision.digest())
            waiting = await tool_calls.awaiting_ids(conn, project_id, run.id)
            return DecisionOutcome(run=run, call_status=call.status, waiting=waiting, stored=[])
        if call.status != "awaiting_approval":
            raise FailedPrecondition(
                f"tool call {decision.tool_call_id!r} is {call.status}, not awaiting "
                "approval: it was decided already"
            )
        if run.status != "waiting":
            raise FailedPrecondition(f"run {run.id} is {run.status}, not waiting")
        if decision.arguments is not None:
            await _check_arguments(decision.arguments, call.tool_parameters)
        status, why, batch = _decision_effects(run, call, decision)
        await tool_calls.decide(
            conn,
            project_id,
            run_id,
            decision.tool_call_id,
            status=status,
            decided_by=decision.decided_by,
            reason=decision.reason,
            request_id=decision.request_id,
            digest=decision.digest(),
            arguments=decision.arguments,
            error=why,
        )
        waiting = await tool_calls.awaiting_ids(conn, project_id, run.id)
        current = run
        if not waiting:
            requeued = await runs.requeue_waiting(conn, project_id, run.id)
            assert requeued is not None  # locked and waiting above
            current = requeued
            batch.append(_status_changed(run, "waiting", "queued", "every held call decided"))
            await notify(conn, QUEUED_CHANNEL, run.id)
        stored = await append_run_events(conn, run, batch)
    return DecisionOutcome(run=current, call_status=status, waiting=waiting, stored=stored)


def _decision_effects(
    run: RunRecord, call: ToolCallRow, decision: Decision
) -> tuple[str, str | None, list[events.RunEvent]]:
    """The call's new status, the error the model will read (rejections), the events."""
    if decision.approve:
        return "approved", None, []
    why = f"rejected by a person: {decision.reason}"
    return "rejected", why, [_rejection(run.agent_name, call, why)]


def _rejection(agent_name: str, call: ToolCallRow, why: str) -> events.ToolResponse:
    """The TOOL_RESPONSE of a held call answered ``why`` instead of being executed."""
    return events.ToolResponse(
        agent_name=agent_name,
        tool_call_id=call.tool_call_id,
        tool_name=call.tool_name,
        status="rejected",
        result={"error": why},
        error=why,
        step=call.step_number,
    )


def _status_changed(run: RunRecord, before: str, after: str, why: str) -> events.RunEvent:
    return events.StatusChanged(
        agent_name=run.agent_name,
        from_status=before,  # type: ignore[arg-type]
        to_status=after,  # type: ignore[arg-type]
        reason=why,
    )


async def _check_arguments(arguments: dict[str, Any], schema: Any) -> None:
    """Edited arguments must fit the parameter schema the model saw for the tool (an MCP
    server's: checked off the event loop within a time limit, its patterns on RE2)."""
    if not isinstance(schema, dict):
        return
    try:
        verdict = await schema_pool().check(schema, arguments, any_draft=True)
    except SchemaCheckTimeout as exc:
        raise InvalidArgument.for_field(
            "arguments", f"could not be checked against the tool's parameter schema: {exc}"
        ) from exc
    if verdict.schema_error is not None or verdict.ok:
        return  # the tool's own schema is broken: nothing to hold edits to
    problem = verdict.problems[0]
    where = "/".join(str(p) for p in problem.path)
    raise InvalidArgument.for_field(
        f"arguments{'.' + where if where else ''}",
        f"does not fit the tool's parameter schema: {problem.message}",
    )


async def answer_held_calls(
    conn: asyncpg.Connection, run: RunRecord, why: str
) -> list[events.RunEvent]:
    """Marks the run's held calls (awaiting or approved, never executed) ``rejected`` with
    ``why``; their TOOL_RESPONSEs, for the caller to append in its transaction."""
    answered = await tool_calls.reject_held(conn, run.project_id, run.id, why)
    return [_rejection(run.agent_name, call, why) for call in answered]


async def expire_overdue_approvals(pool: asyncpg.Pool) -> int:
    """Applies the deadline of every overdue waiting call (at most :data:`SWEEP_BATCH` runs
    per tick): ``reject`` answers the call like a person's rejection; ``fail`` answers all
    held calls of the run and fails it. Returns how many runs it found overdue:
    :data:`SWEEP_BATCH` means more may be waiting."""
    overdue = await tool_calls.overdue_runs(pool, SWEEP_BATCH)
    for project_id, run_id in overdue:
        await _expire_run(pool, project_id, run_id)
    return len(overdue)


async def _expire_run(
    pool: asyncpg.Pool, project_id: str, run_id: str
) -> list[events.PersistedEvent]:
    async with pool.acquire() as conn, conn.transaction():
        run = await runs.find(conn, project_id, run_id, lock="skip_locked")
        if run is None or run.status != "waiting":
            return []  # another worker (or a person) got there first
        calls = await tool_calls.overdue(conn, project_id, run_id)
        if not calls:
            return []
        fail = next((c for c in calls if c.approval_on_deadline == "fail"), None)
        if fail is not None:
            message = (
                f"approval deadline passed: tool call {fail.tool_call_id!r} "
                f"({fail.tool_name}) was not decided in time"
            )
            batch = await answer_held_calls(conn, run, f"not executed: {message}")
            finished = await runs.fail_waiting(conn, project_id, run_id, message)
            assert finished is not None  # locked and waiting above
            batch += [
                _deadline_event(run, message, calls),
                _status_changed(run, "waiting", "failed", "approval deadline"),
                events.RunFinished(agent_name=run.agent_name, run=finished.snapshot()),
            ]
            return await append_run_events(conn, run, batch)
        batch = [_deadline_event(run, "approval deadline passed: call rejected", calls)]
        for call in calls:
            why = "rejected: nobody decided before the approval deadline"
            await tool_calls.decide(
                conn,
                project_id,
                run_id,
                call.tool_call_id,
                status="rejected",
                decided_by=DEADLINE_DECIDER,
                reason="approval deadline passed",
                request_id=None,
                digest=None,
                arguments=None,
                error=why,
            )
            batch.append(_rejection(run.agent_name, call, why))
        if not await tool_calls.awaiting_ids(conn, project_id, run_id):
            await runs.requeue_waiting(conn, project_id, run_id)
            batch.append(_status_changed(run, "waiting", "queued", "approval deadline"))
            await notify(conn, QUEUED_CHANNEL, run_id)
        return await append_run_events(conn, run, batch)


def _deadline_event(run: RunRecord, message: str, calls: list[ToolCallRow]) -> events.RunEvent:
    return events.Safety(
        agent_name=run.agent_name,
        kind="approval_deadline",
        message=message,
        details={"tool_call_ids": [c.tool_call_id for c in calls]},
        step=max(c.step_number for c in calls),
    )
