"""The agent loop's side of tool-call approval (issue #19): holding a step, and continuing
it once every held call is decided.

**Holding.** A step whose calls include some the definition's policy holds
(:func:`held_calls`) first runs the others, then in one transaction records their results
(rows + TOOL_RESPONSE), marks the held ones ``awaiting_approval`` (with the deadline and
the parameter schema the model saw), moves the run ``running -> waiting`` (no lease) and
appends SAFETY(approval_required) naming what waits and STATUS_CHANGED. The step's tool
message is not written yet: the conversation ends with the model's reply.

A crash before that commit leaves every call of the step ``started``: crash recovery
answers them ``interrupted`` and the held calls were never executed.

**Continuing.** DecideToolCall re-queues the run; any executor claims it. Its step is
recognised by decided rows at the last step (:func:`load_held_step`);
:func:`settle_held_step` marks the approved calls ``started`` and runs them, and writes the
step's one tool message with every call's answer (the earlier results and rejections come
from their rows; only the new answers get TOOL_RESPONSE events).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg
import structlog
from google.genai import types

from agentfleet import events
from services.executor.approvals.approvals import ApprovalPolicy, ApprovalRule
from services.executor.calls import CallResult, PlannedCall, tool_responses
from services.executor.model.model_request import interrupted_call_result
from services.executor.run_path.recovery import INTERRUPTED_BY_CRASH, Continuation, pair_open_calls
from services.executor.runs import RunRecord, append_run_events
from services.executor.store import runs, tool_calls
from services.executor.store.persistence import LeaseLost, RunRecorder
from services.executor.store.tool_calls import ToolCallRow
from services.executor.tools.tool_gateway import ResolvedTool

log = structlog.get_logger(__name__)

RunCalls = Callable[[Sequence[PlannedCall]], Awaitable[list[CallResult]]]
"""Runs calls concurrently (:meth:`StepRunner.run_calls`); results in order."""

_ANSWERED = frozenset({"completed", "failed", "refused", "interrupted", "rejected"})


@dataclass(frozen=True, kw_only=True, slots=True)
class HeldCall:
    """A call of the step that waits for a person."""

    planned: PlannedCall
    rule: ApprovalRule
    parameters: dict[str, Any]
    """The tool's parameter schema, as the model saw it."""


def held_calls(
    policy: ApprovalPolicy, calls: Sequence[PlannedCall], tools: Mapping[str, ResolvedTool]
) -> list[HeldCall]:
    """The calls of a step the policy holds (refused calls never run, so never wait)."""
    held: list[HeldCall] = []
    for call in calls:
        if call.refusal is not None:
            continue
        rule = policy.rule_for(call.tool_name, call.arguments)
        if rule is not None:
            tool = tools.get(call.tool_name)
            parameters = dict(tool.parameters) if tool is not None else {}
            held.append(HeldCall(planned=call, rule=rule, parameters=parameters))
    return held


async def hold_step(
    *,
    pool: asyncpg.Pool,
    recorder: RunRecorder,
    owner: str,
    step: int,
    answered: Sequence[CallResult],
    held: Sequence[HeldCall],
) -> None:
    """Parks the run once the step's calls that need no approval ran (``answered``), see
    the module docstring. :class:`LeaseLost` when the run is no longer this worker's."""
    run = recorder.run
    batch: list[events.RunEvent] = [*tool_responses(answered, agent_name=run.agent_name, step=step)]
    waits = [
        {
            "tool_call_id": h.planned.tool_call_id,
            "tool_name": h.planned.tool_name,
            "arguments": h.planned.arguments,
            "deadline_s": h.rule.deadline_s,
            "on_deadline": h.rule.on_deadline,
        }
        for h in held
    ]
    names = ", ".join(f"{h.planned.tool_name} ({h.planned.tool_call_id})" for h in held)
    batch += [
        events.Safety(
            agent_name=run.agent_name,
            kind="approval_required",
            message=f"waiting for approval: {names}",
            details={"calls": waits},
            step=step,
        ),
        events.StatusChanged(
            agent_name=run.agent_name,
            from_status="running",
            to_status="waiting",
            reason=f"waiting for approval: {names}",
        ),
    ]
    async with pool.acquire() as conn, conn.transaction():
        parked = await runs.park_waiting(conn, run.project_id, run.id, owner)
        if parked is None:
            raise LeaseLost(f"run {run.id}: lease lost by worker {owner}")
        answers = [
            (r.planned.tool_call_id, r.status, r.response, r.error, r.duration_ms) for r in answered
        ]
        await tool_calls.finish_started(conn, run.project_id, run.id, answers)
        holds = [
            (h.planned.tool_call_id, h.parameters, h.rule.on_deadline, h.rule.deadline_s)
            for h in held
        ]
        await tool_calls.hold(conn, run.project_id, run.id, holds)
        await append_run_events(conn, run, batch)
    recorder.open_calls = []
    log.info("run_waiting", step=step, held=[h.planned.tool_call_id for h in held])


def not_held(calls: Sequence[PlannedCall], held: Sequence[HeldCall]) -> list[PlannedCall]:
    """The calls of the step that run at once."""
    held_ids = {h.planned.tool_call_id for h in held}
    return [c for c in calls if c.tool_call_id not in held_ids]


async def begin_held_continuation(
    pool: asyncpg.Pool, recorder: RunRecorder, continuation: Continuation
) -> list[ToolCallRow] | None:
    """The rows of a decided held step (see :func:`load_held_step`), taken out of the
    continuation's open calls: :func:`settle_held_step` answers them all together. A run
    the decisions re-queued (no call ``started`` yet, unlike a take-over from a worker that
    died running the approved calls) records STATUS_CHANGED(queued -> running)."""
    rows = await load_held_step(pool, recorder.run, continuation)
    if rows is None:
        return None
    continuation.open_calls = []
    if not any(r.status == "started" for r in rows):
        changed = events.StatusChanged(
            agent_name=recorder.run.agent_name,
            from_status="queued",
            to_status="running",
            reason="approval decisions made; continuing",
            # Approval plumbing (agentfleet.events.visibility): the continuation's claim.
            is_internal=True,
        )
        await recorder.record_note(step=continuation.step, batch=[changed])
    return rows


async def load_held_step(
    pool: asyncpg.Pool, run: RunRecord, continuation: Continuation
) -> list[ToolCallRow] | None:
    """The call rows of the run's last step when that step was held for approval and is
    not answered yet (its tool message is missing); None otherwise."""
    if not continuation.has_messages or continuation.final_text is not None:
        return None
    if continuation.contents[-1].role != "model":
        return None  # the step's tool message exists: it was settled already
    rows = await tool_calls.of_step(pool, run.project_id, run.id, continuation.step)
    if not any(r.decided_at is not None for r in rows):
        return None
    return rows


async def settle_held_step(
    *,
    pool: asyncpg.Pool,
    recorder: RunRecorder,
    continuation: Continuation,
    rows: Sequence[ToolCallRow],
    run_calls: RunCalls,
) -> types.Content:
    """Runs the approved calls of the held step and records its tool message; returns it."""
    last = continuation.contents[-1]
    asked = [p.function_call for p in last.parts or [] if p.function_call is not None]
    planned = pair_open_calls(asked, rows)
    status = {r.tool_call_id: r for r in rows}
    approved = [p.tool_call_id for p in planned if status[p.tool_call_id].status == "approved"]
    run = recorder.run
    to_run = await tool_calls.start_approved(pool, run.project_id, run.id, approved)
    ran = await run_calls([p for p in planned if p.tool_call_id in to_run])
    by_id = {r.planned.tool_call_id: r for r in ran}
    results: list[CallResult] = []
    for call in planned:
        row = status[call.tool_call_id]
        if call.tool_call_id in by_id:
            results.append(by_id[call.tool_call_id])
        elif row.status in _ANSWERED:
            error = row.error or ""
            response = dict(row.output or {"error": error})
            results.append(
                CallResult(planned=call, status=row.status, response=response, error=error)
            )
        else:  # started by an execution that died: never run twice
            results.append(interrupted_call_result(call, INTERRUPTED_BY_CRASH))
    before = frozenset(
        c.tool_call_id
        for c in planned
        if c.tool_call_id not in by_id and status[c.tool_call_id].status in _ANSWERED
    )
    return await recorder.record_tool_results(
        step=continuation.step, results=results, answered_before=before
    )
