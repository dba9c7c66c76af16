"""The soft stop (DESIGN §6): a step limit, the global step cap, a timeout or a child's
token budget ends a run ``paused`` with a summary instead of cutting it off.

The calls still open are answered, a user message asks the model to summarize, and one
more model call -- with no tools, within the grace period -- gives the summary. A function
call in that reply is refused, and the run is ``paused`` all the same.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import asyncpg
import structlog
from google.genai import types

from agentfleet import events
from agentfleet.llm import ModelClient
from agentfleet.llm.errors import ModelError
from agentfleet.run_limits import MAX_TOTAL_STEPS
from services.executor.loop_state import Progress, Turn
from services.executor.model.model_request import (
    interrupted_call_result,
    plan_calls,
    refused_result,
)
from services.executor.model.quota_waits import quota_waits
from services.executor.run_path.recovery import load_conversation
from services.executor.runs import RunRecord
from services.executor.safety import (
    STEP_LIMIT_MESSAGE,
    TOKEN_BUDGET_MESSAGE,
    StepBudget,
    refuse_all,
)
from services.executor.store.persistence import RunRecorder

log = structlog.get_logger(__name__)


@dataclass(frozen=True, kw_only=True, slots=True)
class SoftStop:
    """Why the run stops: the SAFETY event and the note the model reads."""

    kind: events.SafetyKindName
    note: str
    """The user message asking for a summary."""
    message: str
    """The SAFETY event's text."""
    details: dict[str, Any]


async def wrap_up(
    *,
    pool: asyncpg.Pool,
    model: ModelClient,
    grace_s: float,
    recorder: RunRecorder,
    progress: Progress,
    turn: Turn,
    stop: SoftStop,
) -> RunRecord | None:
    """Answers what is still open, asks for a summary with tools disabled within
    ``grace_s``, and ends the run ``paused``. The final row (None if it had moved on)."""
    run = recorder.run
    step = progress.step
    kind = stop.kind
    if recorder.open_calls:
        why = f"interrupted: the run's deadline passed while this call was running ({kind})"
        results = [
            progress.results.get(c.tool_call_id) or interrupted_call_result(c, why)
            for c in recorder.open_calls
        ]
        await recorder.record_tool_results(step=step, results=results)
    # The conversation as persisted: a cut-off step may have recorded more than the
    # in-memory list holds.
    _system, contents = await load_conversation(pool, project_id=run.project_id, run_id=run.id)
    request = types.Content(role="user", parts=[types.Part(text=stop.note)])
    safety = events.Safety(
        agent_name=run.agent_name, kind=kind, message=stop.message, details=stop.details, step=step
    )
    await recorder.record_note(step=step, batch=[safety], user_message=request)
    contents.append(request)
    summary = progress.last_text or None
    reason = f"{kind}: summary given"
    try:
        async with (
            quota_waits(recorder, step=step, model=turn.model) as on_wait,
            asyncio.timeout(grace_s),
        ):
            reply = await model.generate(
                model=turn.model,
                system_instruction=turn.system,
                contents=contents,
                tools=[],
                config=turn.config,
                on_wait=on_wait,
            )
    except (TimeoutError, ModelError) as exc:
        log.warning("summary_not_given", kind=kind, error=str(exc) or type(exc).__name__)
        reason = f"{kind}: no summary within {grace_s:g}s; partial output kept"
    else:
        calls = refuse_all(
            plan_calls(reply.function_calls, {}, step=step, used_ids=progress.used_ids)
        )
        extra: list[events.RunEvent] = []
        if calls:
            extra.append(
                events.Safety(
                    agent_name=run.agent_name,
                    kind="call_after_soft_stop",
                    message=f"{len(calls)} function call(s) after the soft stop refused",
                    details={"tool_names": [c.tool_name for c in calls]},
                    step=step,
                )
            )
        if reply.text:
            summary = reply.text
        await recorder.record_model_reply(
            step=step, reply=reply, calls=calls, count_step=False, extra_events=extra
        )
        if calls:
            await recorder.record_tool_results(
                step=step, results=[refused_result(c) for c in calls]
            )
            reason = f"{kind}: function call after the soft stop refused"
    return await recorder.record_finish(status="paused", reason=reason, summary=summary)


def soft_stop_due(run: RunRecord, budget: StepBudget, progress: Progress) -> SoftStop | None:
    """The soft stop the next step would pass: step limit, global cap or token budget."""
    limit = budget.exhausted(step_count=run.step_count, total_steps=run.total_steps)
    if limit is not None:
        return SoftStop(
            kind=limit,
            note=STEP_LIMIT_MESSAGE,
            message=budget.message(limit, total_steps=run.total_steps),
            details={
                "max_steps": budget.max_steps,
                "step_count": run.step_count,
                "total_steps": run.total_steps,
                "max_total_steps": MAX_TOTAL_STEPS,
            },
        )
    used = run.tokens_in + run.tokens_out - progress.tokens_at_start
    if run.max_tokens is not None and used >= run.max_tokens:
        return SoftStop(
            kind="token_budget",
            note=TOKEN_BUDGET_MESSAGE,
            message=(
                f"token budget {run.max_tokens} reached ({used} tokens used): summary "
                "requested with tools disabled"
            ),
            details={"max_tokens": run.max_tokens, "tokens_used": used},
        )
    return None
