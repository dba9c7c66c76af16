"""Optional LLM triage of a failed task (seed 002 v4, "should we retry or escalate"): when an
attempt of a task of a graph created with ``llm_triage`` fails and a retry remains, one model
call decides between

- ``retry``: another attempt, with the model's advice in its prompt;
- ``reassign``: another attempt by another agent of the project, named by the model;
- ``escalate``: no attempt; the task pauses (and so its graph) until a person calls
  RetryTask.

Off unless AGENTFLEET_DISPATCHER_TRIAGE_MODEL names a model; like the evaluator an upgrade,
never a dependency: a failed call or an unusable answer (an agent that does not exist, the
same agent) is the mechanical retry. The decision and its reason are recorded on the
session (``triage_decision``, ``triage_reason``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import structlog

from agentfleet.llm import ModelClient
from services.dispatcher.model_json import ask_for_json

__all__ = ["FailureTriage", "LlmTriage", "TriageDecision"]

log = structlog.get_logger(__name__)

MAX_REASON_CHARS = 2_000
TRIAGE_SCHEMA = {
    "type": "object",
    "properties": {
        "decision": {"type": "string", "enum": ["retry", "reassign", "escalate"]},
        "reason": {"type": "string"},
        "advice": {"type": "string"},
        "agent": {"type": "string"},
    },
    "required": ["decision", "reason"],
}
_INSTRUCTION = (
    "A task of a workflow failed. Decide what to do, answering with JSON: decision 'retry' "
    "when another attempt by the same agent can succeed (give advice: what to do "
    "differently), 'reassign' when another of the listed agents is better suited (give its "
    "name as agent), or 'escalate' when a person must look at it first. Always give reason."
)


@dataclass(frozen=True, kw_only=True, slots=True)
class TriageDecision:
    decision: Literal["retry", "reassign", "escalate"]
    reason: str
    advice: str = ""
    """For ``retry``: what the next attempt should do differently (goes into its prompt)."""
    agent: str = ""
    """For ``reassign``: the agent of the next attempt (one of the candidates)."""


class FailureTriage(Protocol):
    async def decide(
        self,
        *,
        title: str,
        description: str,
        agent: str,
        error: str,
        candidates: Sequence[str],
    ) -> TriageDecision | None:
        """What to do with a failed attempt; ``None``: the mechanical retry."""
        ...


class LlmTriage:
    """One model call with a JSON-schema answer per failed attempt of a triaged graph."""

    def __init__(self, client: ModelClient, *, model: str) -> None:
        self._client = client
        self._model = model

    async def decide(
        self,
        *,
        title: str,
        description: str,
        agent: str,
        error: str,
        candidates: Sequence[str],
    ) -> TriageDecision | None:
        prompt = (
            f"Task: {title}\n{description[:10_000]}\n\nAgent that failed: {agent}\n"
            f"Error: {error[:10_000]}\n\nOther agents: {', '.join(candidates) or '(none)'}"
        )
        try:
            answer = await ask_for_json(
                self._client,
                model=self._model,
                instruction=_INSTRUCTION,
                prompt=prompt,
                schema=TRIAGE_SCHEMA,
            )
        except Exception as exc:  # the triage is an upgrade, never a dependency
            log.warning("failure triage failed; retrying mechanically", error=str(exc))
            return None
        return usable_decision(answer, agent=agent, candidates=candidates)


def usable_decision(
    answer: object, *, agent: str, candidates: Sequence[str]
) -> TriageDecision | None:
    """The model's answer as a decision, or ``None`` when it is not one that can be
    applied (unknown decision, a reassignment to no other known agent). Pure."""
    if not isinstance(answer, dict):
        return None
    decision = answer.get("decision")
    reason = str(answer.get("reason") or "")[:MAX_REASON_CHARS]
    if decision == "retry":
        advice = str(answer.get("advice") or "")[:MAX_REASON_CHARS]
        return TriageDecision(decision="retry", reason=reason, advice=advice)
    if decision == "escalate":
        return TriageDecision(decision="escalate", reason=reason)
    chosen = str(answer.get("agent") or "")
    if decision == "reassign" and chosen != agent and chosen in candidates:
        return TriageDecision(decision="reassign", reason=reason, agent=chosen)
    return None
