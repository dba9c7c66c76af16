"""Applying the end of a followed run to its task (DESIGN §9 "Outcome"): a paused run is
resumed while the step cap allows, a completed output may be judged by the evaluator and sent
back for a retry, and every other end becomes the task's outcome through ``transitions``."""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg
import structlog

from agentfleet.graph.task_properties import (
    agent_allowed,
    allowed_agent_patterns,
    task_max_resumes,
)
from agentfleet.run_limits import DEFAULT_MAX_RESUMES, MAX_TOTAL_STEPS
from services.dispatcher.evaluator import OutputEvaluator
from services.dispatcher.runs import RunControl
from services.dispatcher.store import sessions, transitions
from services.dispatcher.store import triage as triage_store
from services.dispatcher.store.transitions import Attempt, RetryBackoff
from services.dispatcher.triage import FailureTriage, TriageDecision

__all__ = ["AttemptOutcomes", "Ended"]

log = structlog.get_logger(__name__)

MAX_CANDIDATES = 50
"""Agents the triage is shown as possible reassignments (the first by name)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Ended:
    """What ``AttemptOutcomes.finish`` did with the attempt."""

    resumed: bool = False
    """The paused run was resumed: the attempt goes on."""
    recheck: bool = False
    """The task completed and left a dependent waiting: ``dependents.unblock`` it."""


@dataclass(frozen=True, kw_only=True, slots=True)
class AttemptOutcomes:
    """Writes how attempts end."""

    pool: asyncpg.Pool
    runs: RunControl
    evaluator: OutputEvaluator | None
    """Judges completed outputs; None: a completed run completes its task."""
    backoff: RetryBackoff
    triage: FailureTriage | None = None
    """Decides what to do with failed attempts of graphs that ask for it; None: retry."""
    max_resumes: int = DEFAULT_MAX_RESUMES
    """Resumes of a paused run per attempt when the task names none (``max_resumes``)."""

    async def finish(self, attempt: Attempt, row: asyncpg.Record) -> Ended:
        """Applies the ended run of ``row`` (a ``transitions.settle`` row) to the task."""
        status = row["status"]
        resume_bound = await self._resume_bound(attempt) if status == "paused" else 0
        if status == "paused" and attempt.resumes >= resume_bound:
            # A run that pauses at every execution (each cut by its deadline, say) would be
            # resumed, and billed a summary call, until the 500-step cap: bounded here.
            error = (
                f"run paused again after {attempt.resumes} automatic resume(s), the task's "
                f"max_resumes ({resume_bound}): {row['summary']}"
            )
            await self.fail(attempt, error)
            return Ended()
        if status == "paused" and await self._resume(attempt, row):
            return Ended(resumed=True)
        rejection = await self._rejection(attempt, row) if status == "completed" else None
        error = row["error_message"] or "run failed"
        # Decided before the transaction: a model call holds no connection.
        triaged = await self._triage(attempt, error) if status == "failed" else None
        recheck = False
        async with self.pool.acquire() as conn, conn.transaction():
            if attempt.run_id is not None:
                # The conversation goes into the graph with the outcome, in its transaction.
                await sessions.record_conversations(
                    conn, [(attempt.project_id, attempt.session_id, attempt.run_id)]
                )
            if rejection is not None:
                await transitions.fail(conn, attempt, error=rejection, backoff=self.backoff)
            elif status == "completed":
                completion = await transitions.complete(conn, attempt, summary=row["summary"])
                recheck = completion.done and completion.recheck
            elif status == "paused":
                await transitions.pause(conn, attempt, summary=row["summary"])
            elif await transitions.graph_cancelled(conn, attempt):
                await transitions.cancel(conn, attempt, summary=row["summary"])
            elif status == "cancelled":
                await transitions.fail(
                    conn, attempt, error=f"run cancelled: {row['summary']}", backoff=self.backoff
                )
            elif triaged is not None:
                await self._apply_triage(conn, attempt, error, triaged)
            else:
                await transitions.fail(conn, attempt, error=error, backoff=self.backoff)
        return Ended(recheck=recheck)

    async def _triage(self, attempt: Attempt, error: str) -> TriageDecision | None:
        """The triage's decision for a failed attempt of a graph that asked for one."""
        if self.triage is None:
            return None
        subject = await triage_store.triage_subject(self.pool, attempt)
        if subject is None:
            return None
        candidates = list(subject["candidates"])
        # A create_subtasks task may only go to the agents its creator was allowed.
        allowed = allowed_agent_patterns(subject["properties"] or {})
        if allowed is not None:
            candidates = [name for name in candidates if agent_allowed(name, allowed)]
        return await self.triage.decide(
            title=subject["title"] or attempt.key,
            description=subject["description"],
            agent=subject["agent"] or "",
            error=error,
            candidates=candidates[:MAX_CANDIDATES],
        )

    async def _apply_triage(
        self, conn: asyncpg.Connection, attempt: Attempt, error: str, triaged: TriageDecision
    ) -> None:
        reason = triaged.reason
        if triaged.decision == "escalate":
            # The task (and so its graph) pauses for a person; RetryTask resumes it.
            await triage_store.escalate(conn, attempt, error=error, reason=reason)
        else:
            if triaged.decision == "retry":
                note = f"Advice for this attempt: {triaged.advice or reason}"
            else:
                note = f"Reassigned to {triaged.agent}: {reason}"
                reason = f"{triaged.agent}: {reason}"
            await transitions.fail(conn, attempt, error=f"{error}\n\n{note}", backoff=self.backoff)
        await sessions.record_triage(
            conn,
            attempt.project_id,
            task_id=attempt.task_id,
            session_id=attempt.session_id,
            decision=triaged.decision,
            reason=reason,
            agent=triaged.agent,
        )
        log.info("failed task triaged", task_id=attempt.task_id, decision=triaged.decision)

    async def fail(self, attempt: Attempt, error: str, *, retry: bool = True) -> None:
        """The attempt failed before its run: retried while retries remain (never when
        ``retry`` is false)."""
        async with self.pool.acquire() as conn, conn.transaction():
            if not retry:
                await transitions.exhaust_retries(conn, attempt)
            await transitions.fail(conn, attempt, error=error, backoff=self.backoff)

    async def _rejection(self, attempt: Attempt, row: asyncpg.Record) -> str | None:
        """The evaluator's feedback when it sends a completed output back for a retry.

        With no retry left the output stands: a task is never failed for its evaluation.
        """
        if self.evaluator is None:
            return None
        task = await transitions.evaluation_subject(self.pool, attempt)
        if task is None or not task["can_retry"]:
            return None
        verdict = await self.evaluator.evaluate(
            title=task["title"] or attempt.key,
            description=task["description"],
            output=row["summary"],
        )
        if verdict.accept:
            return None
        return f"the output was not accepted by the evaluator: {verdict.feedback}"

    async def _resume_bound(self, attempt: Attempt) -> int:
        """The task's ``max_resumes`` (a malformed or missing one is the default)."""
        properties = await self.pool.fetchval(
            "SELECT properties FROM kb.graph_objects WHERE project_id = $1 AND id = $2::uuid",
            attempt.project_id,
            attempt.task_id,
        )
        return task_max_resumes(properties or {}, self.max_resumes)

    async def _resume(self, attempt: Attempt, row: asyncpg.Record) -> bool:
        """ResumeRun while the step cap allows; False when the task must end PAUSED."""
        if row["total_steps"] >= MAX_TOTAL_STEPS or attempt.run_id is None:
            return False
        if await transitions.graph_cancelled(self.pool, attempt):
            return False
        why_not = await self.runs.resume(
            attempt.project_id, attempt.run_id, f"{attempt.session_id}:resume:{attempt.resumes + 1}"
        )
        if why_not is not None:
            log.info("cannot resume paused run", run_id=attempt.run_id, reason=why_not)
            return False
        attempt.resumes += 1
        async with self.pool.acquire() as conn:
            await sessions.finish_session(
                conn,
                attempt.project_id,
                attempt.session_id,
                outcome="active",
                final=False,
                resumed=True,
            )
        return True
