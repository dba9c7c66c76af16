"""Optional LLM evaluation of a completed task's output (seed 002 v3): accept it, or send
the task back for another attempt with the evaluator's feedback in its prompt.

Off unless AGENTFLEET_DISPATCHER_EVALUATOR_MODEL names a model. The evaluator is an
upgrade, never a dependency: any failure of the model call accepts the output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import structlog

from agentfleet.llm import ModelClient
from services.dispatcher.model_json import ask_for_json

log = structlog.get_logger(__name__)

VERDICT_SCHEMA = {
    "type": "object",
    "properties": {
        "verdict": {"type": "string", "enum": ["accept", "retry"]},
        "feedback": {"type": "string"},
    },
    "required": ["verdict"],
}
_INSTRUCTION = (
    "You review the output of a task. Answer with JSON: verdict 'accept' when the output "
    "does what the task asks, else 'retry' with feedback saying what to fix."
)


@dataclass(frozen=True, kw_only=True, slots=True)
class Verdict:
    accept: bool
    feedback: str = ""


class OutputEvaluator(Protocol):
    async def evaluate(self, *, title: str, description: str, output: str) -> Verdict:
        """Whether ``output`` completes the task; feedback when it does not."""
        ...


class LlmEvaluator:
    """One model call with a JSON-schema answer per completed task."""

    def __init__(self, client: ModelClient, *, model: str) -> None:
        self._client = client
        self._model = model

    async def evaluate(self, *, title: str, description: str, output: str) -> Verdict:
        prompt = f"Task: {title}\n{description}\n\nOutput:\n{output[:20_000]}"
        try:
            answer = await ask_for_json(
                self._client,
                model=self._model,
                instruction=_INSTRUCTION,
                prompt=prompt,
                schema=VERDICT_SCHEMA,
            )
        except Exception as exc:  # the evaluator is an upgrade, never a dependency
            log.warning("output evaluation failed; accepting the output", error=str(exc))
            return Verdict(accept=True)
        if not isinstance(answer, dict) or answer.get("verdict") != "retry":
            return Verdict(accept=True)
        return Verdict(accept=False, feedback=str(answer.get("feedback", ""))[:2000])
