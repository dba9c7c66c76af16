"""How the dispatch loop paces itself: lease and poll, and every wait or retry bound of a
failure (a task's retry backoff, TriggerRun retries, a rejected credential, a failed round)."""

from __future__ import annotations

from dataclasses import dataclass, field

from agentfleet.run_limits import DEFAULT_MAX_RESUMES
from services.dispatcher.store.transitions import RetryBackoff

__all__ = ["CredentialPauseTiming", "LoopTiming", "TriggerRetry"]


@dataclass(frozen=True, kw_only=True, slots=True)
class TriggerRetry:
    """How often a transient TriggerRun error is retried within one start."""

    attempts: int = 5
    """Calls in all, the first included (waits 0.1, 0.2, 0.4, 0.8 s with the defaults)."""
    first_wait_s: float = 0.1
    max_wait_s: float = 2.0


@dataclass(frozen=True, kw_only=True, slots=True)
class CredentialPauseTiming:
    first_s: float = 10.0
    """How long dispatching pauses after the first rejection of the credential."""
    max_s: float = 300.0
    """The pause doubles at each further rejection, up to this."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LoopTiming:
    lease_s: float = 5.0
    poll_s: float = 1.0
    retry_backoff: RetryBackoff = field(default_factory=RetryBackoff)
    """Wait before a failed task's retry (doubling per retry, capped)."""
    trigger_retry: TriggerRetry = field(default_factory=TriggerRetry)
    """Retries of a transient TriggerRun error within one start."""
    credential_pause: CredentialPauseTiming = field(default_factory=CredentialPauseTiming)
    """How long dispatching pauses while the executor rejects the dispatcher's credential."""
    task_timeout_s: float | None = None
    """A task's run timeout when the task names none; None: the agent's default_timeout."""
    max_resumes: int = DEFAULT_MAX_RESUMES
    """Resumes of a paused run per attempt when its task names no ``max_resumes``."""
    round_retry_s: tuple[float, float] = (0.2, 5.0)
    """Wait after a failed round (first, doubling up to the second), e.g. a database outage."""
