"""One step of the agent loop (DESIGN §4): the model call, the reply recorded before any
tool runs, the calls screened (depth, doom loop), held for approval or run concurrently,
and their results recorded. :class:`StepResult` says whether the run goes on."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg
from google.genai import types
from opentelemetry import trace

from agentfleet.llm import ModelClient
from agentfleet.observability import metrics
from services.executor.approvals.approval_resume import held_calls, hold_step, not_held
from services.executor.approvals.approvals import parse_approval_policy
from services.executor.calls import CallResult, PlannedCall
from services.executor.coordination.coordination import Coordinator, screen_depth
from services.executor.loop_state import Progress, Turn
from services.executor.model.model_request import (
    not_allowed_events,
    outcome_result,
    plan_calls,
    refused_result,
)
from services.executor.registry.definitions import AgentDefinition
from services.executor.run_path.streaming import ModelCall, call_model
from services.executor.run_path.structured_output import StructuredFinish
from services.executor.runs import RunRecord
from services.executor.safety import screen_calls
from services.executor.store.persistence import RunRecorder, complete_then_cancel
from services.executor.tools.tool_gateway import ResolvedTool, ToolCallRequest, ToolGateway

_tracer = trace.get_tracer("agentfleet.executor")


@dataclass(frozen=True, slots=True)
class StepResult:
    """How a step left the run: it goes on with the next step, or this execution ended."""

    ended: bool
    run: RunRecord | None = None
    """When ended: the final row; None when the run was left as it is (waiting for an
    approval, or moved on by someone else)."""

    @staticmethod
    def end(run: RunRecord | None) -> StepResult:
        return StepResult(ended=True, run=run)


NEXT_STEP = StepResult(ended=False)


@dataclass(frozen=True, slots=True)
class Answered:
    """Ends a run without an output schema: its answer is the summary."""

    recorder: RunRecorder

    async def finish(self, answer: str) -> RunRecord | None:
        return await self.recorder.record_finish(
            status="completed", reason="model answered", summary=answer
        )

    async def finish_recovered(self, answer: str) -> RunRecord | None:
        return await self.finish(answer)


@dataclass(kw_only=True, slots=True)
class StepRunner:
    """Runs the steps of one execution; built by the
    :class:`~services.executor.run_path.loop.AgentLoop`."""

    pool: asyncpg.Pool
    model: ModelClient
    tools: ToolGateway
    owner: str
    """Lease owner name of the worker (host:pid:...)."""
    tool_timeout_s: float | None
    coordinator: Coordinator | None

    async def run(
        self,
        recorder: RunRecorder,
        definition: AgentDefinition,
        progress: Progress,
        turn: Turn,
        contents: list[types.Content],
        callable_tools: dict[str, ResolvedTool],
    ) -> StepResult:
        """One model call and its tool calls."""
        progress.step += 1
        step = progress.step
        run = recorder.run
        with (
            _tracer.start_as_current_span(f"step {step}", attributes={"agentfleet.step": step}),
            metrics.timed_step(run.agent_name),
        ):
            reply = await call_model(
                model=self.model,
                pool=self.pool,
                recorder=recorder,
                step=step,
                call=ModelCall.of(turn, contents),
                streaming=run.stream_deltas,
            )
            planned, depth_events = screen_depth(
                plan_calls(
                    reply.function_calls, callable_tools, step=step, used_ids=progress.used_ids
                ),
                depth=run.depth,
                definition_tools=definition.tools,
                agent_name=run.agent_name,
                step=step,
            )
            screened = screen_calls(
                planned, progress.detector, agent_name=run.agent_name, step=step
            )
            if reply.text:
                progress.last_text = reply.text
            refusals = not_allowed_events(planned, agent_name=run.agent_name, step=step)
            await recorder.record_model_reply(
                step=step,
                reply=reply,
                calls=screened.calls,
                extra_events=[*refusals, *depth_events, *screened.safety_events],
            )
            contents.append(reply.content)
            if not screened.calls:
                answered = self.answered(recorder, progress, turn, contents, definition)
                return StepResult.end(await answered.finish(reply.text))
            if screened.stop_error is not None:
                await recorder.record_tool_results(
                    step=step, results=[refused_result(c) for c in screened.calls]
                )
                return StepResult.end(
                    await recorder.record_finish(
                        status="failed",
                        reason="doom loop",
                        summary=progress.last_text or None,
                        error_message=screened.stop_error,
                    )
                )
            progress.results = {}
            held = held_calls(
                parse_approval_policy(definition.config), screened.calls, callable_tools
            )
            if held:
                # Calls that need a person wait; the others run now (approval_resume.py).
                results = await self.run_calls(
                    recorder.run, definition, not_held(screened.calls, held), progress.results
                )
                await complete_then_cancel(
                    hold_step(
                        pool=self.pool,
                        recorder=recorder,
                        owner=self.owner,
                        step=step,
                        answered=results,
                        held=held,
                    )
                )
                return StepResult.end(None)  # the run waits: this execution has no outcome
            results = await self.run_calls(
                recorder.run, definition, screened.calls, progress.results
            )
            tool_content = await recorder.record_tool_results(step=step, results=results)
            contents.append(tool_content)
            return NEXT_STEP

    def answered(
        self,
        recorder: RunRecorder,
        progress: Progress,
        turn: Turn,
        contents: list[types.Content],
        definition: AgentDefinition,
    ) -> Answered | StructuredFinish:
        """How the run ends now that the model answered without a function call (also for
        an answer recovered from a worker that died before it ended the run)."""
        if definition.output_schema is None:
            return Answered(recorder)
        return StructuredFinish(
            model=self.model,
            pool=self.pool,
            recorder=recorder,
            progress=progress,
            turn=turn,
            contents=contents,
            schema=definition.output_schema,
        )

    async def run_calls(
        self,
        run: RunRecord,
        definition: AgentDefinition,
        planned: Sequence[PlannedCall],
        done: dict[str, CallResult],
    ) -> list[CallResult]:
        """Runs the calls concurrently; results in the order of the calls. Each result is
        also put in ``done`` as soon as it exists."""
        results: list[CallResult | None] = [None] * len(planned)

        async def run_one(index: int, call: PlannedCall) -> None:
            results[index] = done[call.tool_call_id] = await self._run_call(run, definition, call)

        async with asyncio.TaskGroup() as group:
            for index, call in enumerate(planned):
                group.create_task(run_one(index, call))
        return [r for r in results if r is not None]

    async def _run_call(
        self, run: RunRecord, definition: AgentDefinition, call: PlannedCall
    ) -> CallResult:
        if call.refusal is not None:
            return refused_result(call)
        with _tracer.start_as_current_span(
            f"execute_tool {call.tool_name}",
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": call.tool_name,
                "gen_ai.tool.call.id": call.tool_call_id,
                "agentfleet.tool.source": call.source,
            },
        ) as span:
            if call.source == "executor" and self.coordinator is not None:
                outcome = await self.coordinator.call(run, definition, call)
            else:
                outcome = await self.tools.call(
                    ToolCallRequest(
                        project_id=run.project_id,
                        run_id=run.id,
                        tool_call_id=call.tool_call_id,
                        tool_name=call.tool_name,
                        arguments=call.arguments,
                        timeout_s=self.tool_timeout_s,
                    )
                )
            if outcome.is_error:
                span.set_status(trace.Status(trace.StatusCode.ERROR, outcome.error))
            return outcome_result(call, outcome)
