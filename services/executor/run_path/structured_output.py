"""Structured output (issue #19): a definition's ``output_schema`` types the run's answer.

How the answer is asked for. Gemini does not combine a response schema with function
calling on the models we run (2.x), so:

- a definition with no callable tools sends the schema (``response_json_schema`` and
  ``response_mime_type: application/json``) with every call: its answer is the output;
- one with tools runs its steps as usual; when the model answers without a function call,
  one more call, with the schema and no tools, asks for the final answer as JSON.

The answer must be a JSON object valid against the schema (jsonschema, draft 2020-12). An
invalid one gets ONE repair call (the validation error sent back to the model, schema still
set); still invalid, the run fails with the validation error. Every extra call is a step.
The output is stored on the run (``agent_runs.output``), besides the summary (the answer's
text).

Schemas are checked when written: :mod:`services.executor.output_schema`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import asyncpg
from google.genai import types

from agentfleet.llm import ModelClient, ModelReply
from services.executor.loop_state import Progress, Turn
from services.executor.output_schema import check_output, with_output_schema
from services.executor.run_path.streaming import ModelCall, call_model
from services.executor.runs import RunRecord
from services.executor.store.persistence import RunRecorder

FINAL_ANSWER_NOTE = (
    "Give your final answer now, as one JSON object that matches the response schema. "
    "No tools are available for this answer."
)
REPAIR_NOTE = (
    "Your answer is not valid against the response schema: {error}. Answer again with one "
    "JSON object that matches the schema."
)


@dataclass(kw_only=True, slots=True)
class StructuredFinish:
    """Ends a run whose definition has an output_schema, from the step that answered."""

    model: ModelClient
    pool: asyncpg.Pool
    recorder: RunRecorder
    progress: Progress
    turn: Turn
    contents: list[types.Content]
    """The conversation so far, the answering reply included; extended in place."""
    schema: Mapping[str, Any]

    async def finish(self, answer: str) -> RunRecord | None:
        """The model answered ``answer`` without function calls: ask for, check and store
        the output (one repair), then end the run ``completed`` or ``failed``."""
        if self.turn.tools:
            answer = (await self._ask(FINAL_ANSWER_NOTE)).text
        output, error = await check_output(self.schema, answer)
        if output is None:
            answer = (await self._ask(REPAIR_NOTE.format(error=error))).text
            output, error = await check_output(self.schema, answer)
        if output is None:
            return await self.recorder.record_finish(
                status="failed",
                reason="output invalid after one repair",
                summary=answer or None,
                error_message=error,
            )
        return await self.recorder.record_finish(
            status="completed", reason="model answered", summary=answer, output=output
        )

    async def finish_recovered(self, answer: str) -> RunRecord | None:
        """A worker died after the model's last answer, before the run ended: that answer
        ends the run when it already fits the schema, else it gets the usual final ask and
        repair (:meth:`finish`)."""
        output, _ = await check_output(self.schema, answer)
        if output is not None:
            return await self.recorder.record_finish(
                status="completed", reason="model answered", summary=answer, output=output
            )
        return await self.finish(answer)

    async def _ask(self, note: str) -> ModelReply:
        """One more step: ``note`` as a user message, the schema set, no tools."""
        request = types.Content(role="user", parts=[types.Part(text=note)])
        step = self.progress.step
        await self.recorder.record_note(step=step, batch=[], user_message=request)
        self.contents.append(request)
        self.progress.step += 1
        config = with_output_schema(self.turn.config, self.schema)
        reply = await call_model(
            model=self.model,
            pool=self.pool,
            recorder=self.recorder,
            step=self.progress.step,
            call=ModelCall(
                model=self.turn.model,
                system_instruction=self.turn.system,
                contents=self.contents,
                tools=[],
                config=config,
            ),
            streaming=self.recorder.run.stream_deltas,
        )
        if reply.text:
            self.progress.last_text = reply.text
        await self.recorder.record_model_reply(step=self.progress.step, reply=reply, calls=[])
        self.contents.append(reply.content)
        return reply
