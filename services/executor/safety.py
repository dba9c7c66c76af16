"""The safety layers' pure decisions (DESIGN §6; seed 000 D5, D10; seed 003): which step
limit and timeout a run gets, when its step budget is spent, and the doom-loop detector.

Nothing here does I/O; the agent loop asks these objects and acts on their answers.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agentfleet import events
from agentfleet.run_limits import MAX_TOTAL_STEPS
from services.executor.approvals.approvals import parse_approval_policy
from services.executor.calls import PlannedCall
from services.executor.registry.definitions import AgentDefinition
from services.executor.runs import RunRecord

SUB_AGENT_DEFAULT_MAX_STEPS = 50
"""Step limit of a spawned run (depth > 0) whose request and definition name none."""
DEFAULT_TIMEOUT_GRACE_S = 30.0
"""How long the model gets to summarize after the deadline (AGENTFLEET_TIMEOUT_GRACE_S)."""

STEP_LIMIT_MESSAGE = "step limit reached: summarize your progress and stop"
TIMEOUT_MESSAGE = "time's up: summarize your progress and stop"
TOKEN_BUDGET_MESSAGE = "token budget reached: summarize your progress and stop"
CALL_AFTER_SOFT_STOP = (
    "tools are disabled: the run was asked to summarize its progress and stop, "
    "so this call was not executed"
)
DOOM_LOOP_WARN_AT = 3
"""The 3rd identical consecutive call is not executed; the model is told to change approach."""
DOOM_LOOP_STOP_AT = 5
"""The 5th identical consecutive call hard-stops the run (``failed``)."""


def effective_max_steps(*, requested: int | None, definition: int | None, depth: int) -> int | None:
    """The run's step limit: request, else definition, else 50 for a sub-agent; None
    (unlimited, still under :data:`MAX_TOTAL_STEPS`) for a top-level run without one."""
    if requested is not None:
        return requested
    if definition is not None:
        return definition
    return SUB_AGENT_DEFAULT_MAX_STEPS if depth > 0 else None


def effective_timeout_s(*, requested: float | None, definition: float | None) -> float | None:
    """The run's wall-clock budget: the request's (or spawn's) value, else the definition's
    default_timeout; None means no deadline."""
    return requested if requested is not None else definition


def execution_timeout_s(run: RunRecord, definition: AgentDefinition) -> float | None:
    """This execution's wall-clock budget, single and flow runs alike: the request's (or
    spawn's) timeout, else the definition's; time spent waiting for approvals is not counted
    unless the definition's ``config.approvals.count_waiting_in_timeout`` says so."""
    timeout_s = effective_timeout_s(
        requested=run.timeout.total_seconds() if run.timeout is not None else None,
        definition=definition.default_timeout_s,
    )
    if timeout_s is None or not parse_approval_policy(definition.config).count_waiting_in_timeout:
        return timeout_s
    return max(0.001, timeout_s - run.waited_ms / 1000)


BudgetLimit = Literal["step_limit", "total_step_cap"]


@dataclass(frozen=True, kw_only=True, slots=True)
class StepBudget:
    """How many steps this execution may take (a resume gets a fresh one)."""

    max_steps: int | None
    """Steps of this execution; None = unlimited."""
    total_steps_at_start: int
    """total_steps of the run when this execution began (the global cap counts them)."""
    steps_at_start: int = 0
    """step_count when this execution began (non-zero for a recovered run)."""

    def exhausted(self, *, step_count: int, total_steps: int) -> BudgetLimit | None:
        """Which limit stops the next step, if any: the run's own, or the global cap."""
        if total_steps >= MAX_TOTAL_STEPS:
            return "total_step_cap"
        if self.max_steps is not None and step_count >= self.max_steps:
            return "step_limit"
        return None

    def message(self, limit: BudgetLimit, *, total_steps: int) -> str:
        """The SAFETY event text for ``limit``."""
        if limit == "total_step_cap":
            return (
                f"total_steps reached MAX_TOTAL_STEPS ({MAX_TOTAL_STEPS}) at {total_steps}: "
                "summary requested with tools disabled"
            )
        return f"step limit {self.max_steps} reached: summary requested with tools disabled"


def resume_budget_error(*, total_steps: int, requested_max_steps: int | None) -> str | None:
    """Why a resume is refused under the global cap, or None when it may proceed.

    A run at the cap cannot be resumed; an explicit ``max_steps`` that would carry
    total_steps past the cap is refused too (an implicit one is clamped by the cap).
    """
    remaining = MAX_TOTAL_STEPS - total_steps
    if remaining <= 0:
        return (
            f"run has used {total_steps} steps, the MAX_TOTAL_STEPS cap of {MAX_TOTAL_STEPS} "
            "across resumes: it cannot be resumed"
        )
    if requested_max_steps is not None and requested_max_steps > remaining:
        return (
            f"max_steps {requested_max_steps} would take total_steps from {total_steps} to "
            f"{total_steps + requested_max_steps}, past MAX_TOTAL_STEPS {MAX_TOTAL_STEPS} "
            f"(at most {remaining} steps remain)"
        )
    return None


def canonical_call(tool_name: str, arguments: Mapping[str, Any]) -> str:
    """The identity of a call: tool name plus canonical JSON of its arguments (sorted keys,
    no whitespace), so key order and spacing never make two equal calls differ."""
    body = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return f"{tool_name}\x00{body}"


Verdict = Literal["run", "warn", "stop"]


@dataclass(kw_only=True, slots=True)
class DoomLoopDetector:
    """Counts identical consecutive tool calls (calls within one reply count in order).

    ``observe`` answers ``run`` below the warning threshold, ``warn`` for the 3rd and 4th
    identical call (not executed; the model is told to change approach) and ``stop`` from
    the 5th (the run fails). A different call resets the count to 1.
    """

    warn_at: int = DOOM_LOOP_WARN_AT
    stop_at: int = DOOM_LOOP_STOP_AT
    last: str | None = None
    count: int = 0

    def observe(self, tool_name: str, arguments: Mapping[str, Any]) -> Verdict:
        key = canonical_call(tool_name, arguments)
        self.count = self.count + 1 if key == self.last else 1
        self.last = key
        if self.count >= self.stop_at:
            return "stop"
        if self.count >= self.warn_at:
            return "warn"
        return "run"

    @staticmethod
    def warning(tool_name: str, repeats: int) -> str:
        """The error result the model gets instead of the call's output."""
        return (
            f"doom loop detected: {tool_name} was called {repeats} times in a row with "
            "identical arguments, so this call was not executed. The result will not change; "
            "try a different approach (other arguments or another tool), or answer with what "
            "you have."
        )

    @staticmethod
    def stop_message(tool_name: str, repeats: int) -> str:
        """The run's error_message when the detector hard-stops it."""
        return (
            f"doom loop: {tool_name} was called {repeats} times in a row with identical "
            "arguments; the run was stopped"
        )


@dataclass(kw_only=True, slots=True)
class Screening:
    """A reply's calls after the doom-loop detector saw them."""

    calls: list[PlannedCall]
    """The calls, those not to execute carrying a ``refusal``."""
    safety_events: list[events.RunEvent] = field(default_factory=list)
    """SAFETY events (doom_loop_warning, doom_loop_stop)."""
    stop_error: str | None = None
    """Set when the run must stop ``failed``: no call of the reply is executed."""


def screen_calls(
    calls: Sequence[PlannedCall], detector: DoomLoopDetector, *, agent_name: str, step: int
) -> Screening:
    """Feeds a reply's calls to ``detector`` in order; a 3rd/4th identical call is refused
    with the warning, a 5th stops the run (every call of that reply is then refused)."""
    screening = Screening(calls=[])
    for call in calls:
        verdict = detector.observe(call.tool_name, call.arguments)
        details = {"tool_name": call.tool_name, "repeats": detector.count}
        if verdict == "stop" and screening.stop_error is None:
            screening.stop_error = detector.stop_message(call.tool_name, detector.count)
            screening.safety_events.append(
                events.Safety(
                    agent_name=agent_name,
                    kind="doom_loop_stop",
                    message=screening.stop_error,
                    details=details,
                    step=step,
                )
            )
        elif verdict == "warn" and call.refusal is None:
            warning = detector.warning(call.tool_name, detector.count)
            call = dataclasses.replace(call, refusal=warning)
            screening.safety_events.append(
                events.Safety(
                    agent_name=agent_name,
                    kind="doom_loop_warning",
                    message=f"identical call #{detector.count} of {call.tool_name} not executed",
                    details=details,
                    step=step,
                )
            )
        screening.calls.append(call)
    if screening.stop_error is not None:
        why = f"not executed: {screening.stop_error}"
        screening.calls = [
            c if c.refusal is not None else dataclasses.replace(c, refusal=why)
            for c in screening.calls
        ]
    return screening


def refuse_all(calls: Sequence[PlannedCall]) -> list[PlannedCall]:
    """Every call refused as a call after the soft stop (tools are disabled)."""
    return [dataclasses.replace(c, refusal=CALL_AFTER_SOFT_STOP) for c in calls]
