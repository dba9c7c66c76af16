"""ResumeRun (DESIGN §4, §6): a ``paused`` run goes back to ``running`` with a fresh step
budget, in one transaction that

- checks the global cap (total_steps never passes :data:`MAX_TOTAL_STEPS`),
- resets step_count, increments resume_count, applies a new max_steps / timeout,
- appends the extra input (or a plain "continue" note) as a user message, so the
  conversation rebuilt from ``agent_run_messages`` is the one the model sees next,
- records STATUS_CHANGED(paused -> running) and wakes the workers.

The run is handed over as an already-expired lease owned by :data:`RESUME_LEASE_OWNER`:
the first free worker claims it like a recovered run, at once, and knows it was resumed.
A ``request_id`` makes the resume idempotent: the same id streams the same execution (the
same id with another input or budget is refused, INVALID_ARGUMENT on ``request_id``). The
id is kept as a key (``kb.agent_run_resume_requests``, migration 0016) naming the resume's
STATUS_CHANGED; the reason text only shows it to people.
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg
from google.genai import types

from agentfleet import events
from agentfleet.errors import FailedPrecondition
from agentfleet.llm import content_to_json
from agentfleet.postgres.db import notify
from agentfleet.request_ids import check_same_request
from services.executor.queue import RESUME_LEASE_OWNER
from services.executor.runs import RunRecord, append_run_events
from services.executor.safety import resume_budget_error
from services.executor.store import messages, resume_requests, runs
from services.executor.store.runs import QUEUED_CHANNEL, read_run

RESUME_NOTE = "continue"
"""The user message of a resume without extra input."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ResumeParams:
    """A validated ResumeRun request."""

    project_id: str
    run_id: str
    input: str = ""
    """Extra user input; empty = :data:`RESUME_NOTE`."""
    max_steps: int | None = None
    """Step budget of this execution; None = the run's previous max_steps."""
    timeout_s: float | None = None
    max_tokens: int | None = None
    """New token budget of the run (a child resumed by spawn_agents); None keeps it."""
    request_id: str | None = None
    request_fingerprint: str | None = None
    """What the ResumeRun request asked (:func:`~services.executor.run_requests.
    resume_fingerprint`); a repeat of ``request_id`` asking otherwise is refused. None for
    spawn_agents' resumes, found again by their derived key after a recovery."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ResumedRun:
    """The run as resumed, and where its new execution's events start."""

    run: RunRecord
    after_seq: int
    """Stream the run's events after this seq (the resume's STATUS_CHANGED comes next)."""


def resume_reason(request_id: str | None) -> str:
    return f"resumed (request_id {request_id})" if request_id else "resumed"


async def resume_run(pool: asyncpg.Pool, params: ResumeParams) -> ResumedRun:
    """Resumes a paused run. NotFound when the run is not in the project;
    FailedPrecondition when it is not paused or the global step cap forbids it;
    InvalidArgument when its request_id resumed it before with another request."""
    reason = resume_reason(params.request_id)
    async with pool.acquire() as conn, conn.transaction():
        run = await read_run(conn, params.project_id, params.run_id, lock=True)
        if params.request_id:
            earlier = await resume_requests.find(conn, run.id, params.request_id)
            if earlier is not None:
                check_same_request(earlier.request_fingerprint, params.request_fingerprint)
                return ResumedRun(run=run, after_seq=earlier.event_seq - 1)
        if run.status != "paused":
            raise FailedPrecondition(
                f"run {run.id} is {run.status}: only a paused run can be resumed"
            )
        refusal = resume_budget_error(
            total_steps=run.total_steps, requested_max_steps=params.max_steps
        )
        if refusal is not None:
            raise FailedPrecondition(f"run {run.id}: {refusal}")
        resumed = await runs.resume(
            conn,
            run.project_id,
            run.id,
            max_steps=params.max_steps,
            timeout_s=params.timeout_s,
            lease_owner=RESUME_LEASE_OWNER,
            max_tokens=params.max_tokens,
        )
        assert resumed is not None  # locked and paused above
        seq, step = await messages.next_position(conn, run.id)
        note = types.Content(role="user", parts=[types.Part(text=params.input or RESUME_NOTE)])
        await messages.insert(
            conn,
            run.id,
            seq=seq,
            step=step,
            role="user",
            agent_name=run.agent_name,
            content=content_to_json(note),
            # The default note is the platform's; extra input is the caller's own message.
            is_internal=not params.input,
        )
        stored = await append_run_events(
            conn,
            run,
            [
                events.StatusChanged(
                    agent_name=run.agent_name,
                    from_status="paused",
                    to_status="running",
                    reason=reason,
                )
            ],
        )
        if params.request_id:
            await resume_requests.record(
                conn, run.id, params.request_id, stored[0].seq, params.request_fingerprint
            )
        await notify(conn, QUEUED_CHANNEL, run.id)
    return ResumedRun(run=resumed, after_seq=stored[0].seq - 1)
