"""Starting an attempt: its session (found again for an adopted task, else created with the
chosen agent and the prompt) and its run, triggered with bounded retries.

TriggerRun fails in three ways (see :class:`services.dispatcher.runs.RunControl`):

- ``TriggerRefused``: the executor refuses this task; the attempt fails (retried by the
  task's own ``max_retries`` and backoff).
- ``CredentialRejected``: the executor rejects the dispatcher's own credential; no retry of
  any task can fix that, so it is not retried here and the loop pauses dispatching
  (:class:`CredentialPause`).
- a transient gRPC error: retried with exponential backoff, at most ``TriggerRetry.attempts``
  times, after which the error reaches the caller (which leaves the task to its lease).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import asyncpg
import grpc
import structlog
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
)

from agentfleet.graph import GraphObject
from agentfleet.graph.task_properties import task_timeout_s, whole_number
from services.dispatcher.prompt import BlockerResult, build_prompt
from services.dispatcher.runs import RunControl, RunRequest
from services.dispatcher.selector import AgentInfo, Selector
from services.dispatcher.store import sessions
from services.dispatcher.store.transitions import Attempt
from services.dispatcher.timing import CredentialPauseTiming, TriggerRetry

__all__ = ["AttemptStarter", "CredentialPause"]

log = structlog.get_logger(__name__)


class CredentialPause:
    """Dispatching stops while the executor rejects the dispatcher's credential (its service
    token is wrong or revoked): one error line when the pause starts, one trial claim at the
    end of each pause (doubling, capped), one info line once a run is accepted again."""

    def __init__(self, timing: CredentialPauseTiming) -> None:
        self._timing = timing
        self._pause_s = 0.0
        self._until = 0.0

    @property
    def active(self) -> bool:
        return time.monotonic() < self._until

    def rejected(self, reason: str) -> None:
        if time.monotonic() < self._until:
            return  # a start that was already under way: the same rejection
        if self._pause_s == 0.0:
            log.error(
                "the executor rejects the dispatcher's service credential; dispatching "
                "paused until it accepts it (check AGENTFLEET_SERVICE_TOKEN or _FILE)",
                reason=reason,
                retry_in_s=self._timing.first_s,
            )
            self._pause_s = self._timing.first_s
        else:
            self._pause_s = min(self._pause_s * 2, self._timing.max_s)
        self._until = time.monotonic() + self._pause_s

    def accepted(self) -> None:
        if self._pause_s:
            log.info("the executor accepts the dispatcher's credential again; dispatching")
        self._pause_s = 0.0
        self._until = 0.0


def _log_retry(state: RetryCallState) -> None:
    exc = state.outcome.exception() if state.outcome is not None else None
    code = exc.code().name if isinstance(exc, grpc.aio.AioRpcError) else type(exc).__name__
    delay = state.next_action.sleep if state.next_action is not None else 0.0
    log.warning("TriggerRun failed; retrying", code=code, delay_s=delay)


@dataclass(frozen=True, kw_only=True, slots=True)
class AttemptStarter:
    """Prepares an attempt's session and triggers its run."""

    pool: asyncpg.Pool
    runs: RunControl
    selector: Selector
    owner: str
    """The dispatcher's name, written on the sessions it creates."""
    retry: TriggerRetry
    task_timeout_s: float | None = None
    """A task's timeout when it names none; None: the agent's default_timeout."""

    async def agents_by_project(
        self, tasks: list[GraphObject], conn: asyncpg.Connection
    ) -> dict[str, list[AgentInfo]]:
        """The agents of the projects of a claimed batch whose tasks need a choice: read once
        per batch, not once per task."""
        agents: dict[str, list[AgentInfo]] = {}
        for task in tasks:
            if task.project_id not in agents and not task.properties.get("assigned_agent"):
                agents[task.project_id] = await self.selector.agents(task.project_id, conn=conn)
        return agents

    async def find_session(self, attempt: Attempt) -> GraphObject | None:
        """The session an earlier owner of an adopted attempt created, if it got that far."""
        return await sessions.get_session(self.pool, attempt.project_id, attempt.session_id)

    async def create_session(
        self,
        task: GraphObject,
        attempt: Attempt,
        blockers: list[BlockerResult] | None,
        agents: list[AgentInfo] | None,
    ) -> GraphObject:
        """Chooses the agent (NoAgent when none fits) and writes the session with its prompt;
        ``blockers`` and ``agents`` when the claim already read them."""
        p = task.properties
        choice = await self.selector.select(attempt.project_id, p, agents=agents)
        if blockers is None:
            blockers = await sessions.completed_blockers(self.pool, attempt.project_id, task.id)
        previous = p.get("previous_session_id")
        prompt = build_prompt(
            title=str(p.get("title", "")),
            description=str(p.get("description", "")),
            context=p.get("context"),
            blockers=blockers,
            previous_error=str(p["error_message"]) if previous and p.get("error_message") else None,
            feedback=p.get("feedback"),
        )
        return await sessions.create_session(
            self.pool,
            attempt.project_id,
            session_id=attempt.session_id,
            task=task,
            attempt=whole_number(p.get("attempts"), 1, 2**31 - 1) or 1,
            choice=choice,
            prompt=prompt,
            follows_up=str(previous) if previous else None,
            informed_by=[b.session_id for b in blockers if b.session_id],
            dispatcher=self.owner,
        )

    async def trigger(self, task: GraphObject, attempt: Attempt, agent: str, prompt: str) -> str:
        """TriggerRun with request_id = session id (idempotent: an adopter gets the same
        run); transient errors retried as :class:`TriggerRetry` says."""
        retrying = AsyncRetrying(
            retry=retry_if_exception_type(grpc.aio.AioRpcError),
            stop=stop_after_attempt(self.retry.attempts),
            wait=wait_exponential(multiplier=self.retry.first_wait_s, max=self.retry.max_wait_s),
            before_sleep=_log_retry,
            reraise=True,
        )
        run = RunRequest(
            project_id=attempt.project_id,
            agent_name=agent,
            input=prompt,
            request_id=attempt.session_id,
            task_id=attempt.task_id,
            timeout_s=task_timeout_s(task.properties) or self.task_timeout_s,
        )
        return await retrying(self.runs.trigger, run)
