"""The ``single``-flow agent loop (DESIGN §4): one model call per step, the reply persisted
before any tool runs, its function calls run concurrently through the :class:`ToolGateway`,
their results persisted and fed back, until the model answers with text alone.

Outcomes: ``completed`` (summary = final text), ``failed`` (error_message), ``cancelled``
(summary = last model text) when :meth:`RunControl.cancel` was called before the task was
cancelled. A task cancelled without a recorded reason (shutdown) or a lost lease leaves the
run ``running`` for crash recovery.

Seams for the safety layers: every :class:`StepHook` is consulted at each step boundary and
may stop the run with a :class:`StopRun`; :class:`RunControl` records why a run is stopped
before its task is cancelled.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import asyncpg
import structlog
from google.genai import types
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from agentfleet import events
from agentfleet.errors import AgentFleetError, FailedPrecondition
from agentfleet.llm import ModelClient
from agentfleet.llm.errors import ModelError
from agentfleet.telemetry import current_trace_id
from services.executor.definitions import AgentDefinition
from services.executor.model_request import (
    function_tools,
    generation_config,
    interrupted_call_result,
    interrupted_result,
    outcome_result,
    plan_calls,
    refused_result,
)
from services.executor.persistence import (
    CallResult,
    LeaseLost,
    PlannedCall,
    RunRecorder,
    load_conversation,
)
from services.executor.recovery import INTERRUPTED_BY_CRASH, Continuation, load_continuation
from services.executor.runs import RunRecord, RunStatus
from services.executor.safety import (
    DEFAULT_TIMEOUT_GRACE_S,
    MAX_TOTAL_STEPS,
    STEP_LIMIT_MESSAGE,
    TIMEOUT_MESSAGE,
    DoomLoopDetector,
    StepBudget,
    effective_max_steps,
    effective_timeout_s,
    refuse_all,
    screen_calls,
)
from services.executor.tool_gateway import ResolvedTool, ToolCallRequest, ToolGateway

log = structlog.get_logger(__name__)
_tracer = trace.get_tracer("agentfleet.executor")
T = TypeVar("T")


class DefinitionSource(Protocol):
    async def get(self, project_id: str, name: str) -> AgentDefinition:
        """The definition; NotFound otherwise."""
        ...


@dataclass(kw_only=True, slots=True)
class RunControl:
    """What the worker tells a running loop. Set a reason *before* cancelling the task."""

    cancel_reason: str | None = None
    """Set: the task's cancellation means "end the run ``cancelled``" with this reason."""
    draining: bool = False
    """Set at shutdown: stop at the next step boundary and leave the run for another worker."""
    resumed: bool = False
    """The run was claimed after ResumeRun (not after a crash): RUN_STARTED says so and the
    doom-loop count starts afresh."""

    def cancel(self, reason: str) -> None:
        if self.cancel_reason is None:
            self.cancel_reason = reason


@dataclass(frozen=True, kw_only=True, slots=True)
class StepBoundary:
    """Where a run stands before its next step (input of :class:`StepHook`)."""

    run: RunRecord
    next_step: int
    """1-based number of the step about to start."""
    contents: Sequence[types.Content]
    last_text: str


@dataclass(frozen=True, kw_only=True, slots=True)
class StopRun:
    """A hook's decision to end the run before the next step."""

    status: RunStatus
    reason: str
    summary: str | None = None
    error_message: str | None = None


class StepHook(Protocol):
    async def __call__(self, boundary: StepBoundary) -> StopRun | None:
        """None lets the step run; a :class:`StopRun` ends the run instead."""
        ...


class _Released(Exception):
    """The loop stopped at a step boundary while draining; the run stays ``running``."""


@dataclass(kw_only=True, slots=True)
class _Progress:
    last_text: str = ""
    step: int = 0
    used_ids: set[str] = field(default_factory=set)
    detector: DoomLoopDetector = field(default_factory=DoomLoopDetector)
    results: dict[str, CallResult] = field(default_factory=dict)
    """Results of the current step's calls as they finish (kept when a timeout cuts it)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class _Turn:
    """What every model call of the run sends besides the conversation."""

    model: str
    system: str | None
    tools: list[types.Tool]
    config: types.GenerateContentConfig


_NEXT_STEP = object()
"""Returned by a step that did not end the run."""


@dataclass(kw_only=True, slots=True)
class AgentLoop:
    """Executes claimed runs; one instance serves every run of a worker."""

    pool: asyncpg.Pool
    definitions: DefinitionSource
    tools: ToolGateway
    model: ModelClient
    owner: str
    """Lease owner name of the worker (host:pid:...)."""
    hub: events.EventHub | None = None
    step_hooks: Sequence[StepHook] = ()
    tool_timeout_s: float | None = None
    timeout_grace_s: float = DEFAULT_TIMEOUT_GRACE_S
    """After a run's deadline, how long the model gets to summarize (no tools)."""

    async def execute(self, run: RunRecord, control: RunControl) -> RunRecord | None:
        """Runs the claimed ``run`` to its end; the final row, or None when the run was left
        ``running`` (draining, or the lease was lost)."""
        recorder = RunRecorder(self.pool, run, owner=self.owner, hub=self.hub)
        progress = _Progress()
        with (
            structlog.contextvars.bound_contextvars(run_id=run.id, project_id=run.project_id),
            _tracer.start_as_current_span(
                f"invoke_agent {run.agent_name}",
                context=_parent_context(run.trace_id),
                attributes={
                    "gen_ai.operation.name": "invoke_agent",
                    "gen_ai.agent.name": run.agent_name,
                    "agentfleet.run_id": run.id,
                    "agentfleet.project_id": run.project_id,
                },
            ) as span,
            structlog.contextvars.bound_contextvars(trace_id=current_trace_id()),
        ):
            try:
                finished = await self._drive(run, recorder, control, progress)
            except asyncio.CancelledError:
                reason = control.cancel_reason
                task = asyncio.current_task()
                if reason is None or task is None:
                    raise
                task.uncancel()
                finished = await _complete_then_cancel(
                    self._stop(recorder, progress, "cancelled", reason, error=None)
                )
            except _Released:
                log.info("run_released", step=progress.step)
                return None
            except LeaseLost as exc:
                log.warning("run_lease_lost", error=exc.message)
                return None
            except Exception as exc:
                message = _error_message(exc)
                if not isinstance(exc, AgentFleetError):
                    log.exception("run_crashed", error=message)
                span.set_status(trace.Status(trace.StatusCode.ERROR, message))
                finished = await _complete_then_cancel(
                    self._stop(recorder, progress, "failed", "run failed", error=message)
                )
            if finished is not None:
                span.set_attribute("agentfleet.run.status", finished.status)
                log.info("run_finished", status=finished.status, steps=finished.step_count)
            return finished

    async def _drive(
        self, run: RunRecord, recorder: RunRecorder, control: RunControl, progress: _Progress
    ) -> RunRecord | None:
        definition = await self.definitions.get(run.project_id, run.agent_name)
        if definition.flow_type != "single":
            raise FailedPrecondition(f"flow_type {definition.flow_type!r} is not supported yet")
        resolved = await self.tools.resolve(
            project_id=run.project_id, patterns=definition.tools, depth=run.depth
        )
        # Coordination tools (executed by the executor) arrive with the coordination issue;
        # until then they are not declared, so the model cannot call them.
        callable_tools = {t.name: t for t in resolved if not t.executed_by_executor}
        turn = _Turn(
            model=definition.model.name,
            system=definition.system_prompt or None,
            tools=function_tools(list(callable_tools.values())),
            config=generation_config(definition.model),
        )
        continuation = await load_continuation(self.pool, run)
        if continuation.has_messages:
            contents = await self._continue(
                recorder, control, progress, continuation, turn, sorted(callable_tools)
            )
            if continuation.final_text is not None:
                # The model had answered; only the completion was lost with the worker.
                return await _complete_then_cancel(
                    recorder.record_finish(
                        status="completed",
                        reason="model answered",
                        summary=continuation.final_text,
                    )
                )
        else:
            contents = [types.Content(role="user", parts=[types.Part(text=run.input)])]
            await _complete_then_cancel(
                recorder.record_start(
                    system_prompt=definition.system_prompt,
                    user_input=contents[0],
                    model_name=definition.model.name,
                    tool_names=sorted(callable_tools),
                    trace_id=current_trace_id(),
                )
            )
        budget = StepBudget(
            max_steps=effective_max_steps(
                requested=run.max_steps, definition=definition.max_steps, depth=run.depth
            ),
            total_steps_at_start=run.total_steps,
            steps_at_start=run.step_count,
        )
        timeout_s = effective_timeout_s(
            requested=run.timeout.total_seconds() if run.timeout is not None else None,
            definition=definition.default_timeout_s,
        )
        # The clock starts when this worker begins executing (fresh, resumed or recovered).
        deadline = None if timeout_s is None else asyncio.get_running_loop().time() + timeout_s
        log.info("run_started", agent=run.agent_name, tools=len(callable_tools))
        while True:
            stop = await self._at_boundary(recorder.run, control, progress, contents)
            if stop is not None:
                return await _complete_then_cancel(
                    self._stop(
                        recorder,
                        progress,
                        stop.status,
                        stop.reason,
                        error=stop.error_message,
                        summary=stop.summary,
                    )
                )
            current = recorder.run
            limit = budget.exhausted(step_count=current.step_count, total_steps=current.total_steps)
            if limit is not None:
                return await self._wrap_up(
                    recorder,
                    progress,
                    turn,
                    kind=limit,
                    note=STEP_LIMIT_MESSAGE,
                    message=budget.message(limit, total_steps=current.total_steps),
                    details={
                        "max_steps": budget.max_steps,
                        "step_count": current.step_count,
                        "total_steps": current.total_steps,
                        "max_total_steps": MAX_TOTAL_STEPS,
                    },
                )
            try:
                async with asyncio.timeout_at(deadline) as scope:
                    finished = await self._step(recorder, progress, turn, contents, callable_tools)
            except TimeoutError:
                if not scope.expired():
                    raise
                assert timeout_s is not None  # only a deadline expires
                return await self._wrap_up(
                    recorder,
                    progress,
                    turn,
                    kind="timeout",
                    note=TIMEOUT_MESSAGE,
                    message=(
                        f"timeout of {timeout_s:g}s reached: in-flight call cancelled, summary "
                        f"requested within {self.timeout_grace_s:g}s"
                    ),
                    details={"timeout_s": timeout_s, "grace_s": self.timeout_grace_s},
                )
            if finished is not _NEXT_STEP:
                return finished

    async def _continue(
        self,
        recorder: RunRecorder,
        control: RunControl,
        progress: _Progress,
        continuation: Continuation,
        turn: _Turn,
        tool_names: Sequence[str],
    ) -> list[types.Content]:
        """Picks up a run that has a conversation: RUN_STARTED (recovered or resumed), and
        an ``interrupted`` answer for every call its previous worker left open."""
        run = recorder.run
        recorder.continue_at(
            next_message_seq=continuation.next_message_seq, open_calls=continuation.open_calls
        )
        progress.step = continuation.step
        progress.last_text = continuation.last_text
        progress.used_ids.update(continuation.used_ids)
        if not control.resumed:
            # Same execution on another worker: the doom-loop count carries over.
            for name, arguments in continuation.past_calls:
                progress.detector.observe(name, arguments)
        started = events.RunStarted(
            agent_name=run.agent_name,
            model_name=turn.model,
            tool_names=tuple(tool_names),
            recovered=not control.resumed,
            resumed=control.resumed,
            worker=self.owner,
        )
        await _complete_then_cancel(recorder.record_note(step=progress.step, batch=[started]))
        log.info("run_continued", resumed=control.resumed, open_calls=len(recorder.open_calls))
        contents = list(continuation.contents)
        if recorder.open_calls:
            results = [
                interrupted_call_result(c, INTERRUPTED_BY_CRASH) for c in recorder.open_calls
            ]
            contents.append(
                await _complete_then_cancel(
                    recorder.record_tool_results(step=progress.step, results=results)
                )
            )
        return contents

    async def _step(
        self,
        recorder: RunRecorder,
        progress: _Progress,
        turn: _Turn,
        contents: list[types.Content],
        callable_tools: dict[str, ResolvedTool],
    ) -> RunRecord | object | None:
        """One model call and its tool calls; the final row when the run ended, else
        :data:`_NEXT_STEP`."""
        progress.step += 1
        step = progress.step
        with _tracer.start_as_current_span(f"step {step}", attributes={"agentfleet.step": step}):
            reply = await self.model.generate(
                model=turn.model,
                system_instruction=turn.system,
                contents=contents,
                tools=turn.tools,
                config=turn.config,
            )
            planned = plan_calls(
                reply.function_calls, callable_tools, step=step, used_ids=progress.used_ids
            )
            screened = screen_calls(
                planned, progress.detector, agent_name=recorder.run.agent_name, step=step
            )
            if reply.text:
                progress.last_text = reply.text
            await _complete_then_cancel(
                recorder.record_model_reply(
                    step=step,
                    reply=reply,
                    calls=screened.calls,
                    extra_events=screened.safety_events,
                )
            )
            contents.append(reply.content)
            if not screened.calls:
                return await _complete_then_cancel(
                    recorder.record_finish(
                        status="completed", reason="model answered", summary=reply.text
                    )
                )
            if screened.stop_error is not None:
                await _complete_then_cancel(
                    recorder.record_tool_results(
                        step=step, results=[refused_result(c) for c in screened.calls]
                    )
                )
                return await _complete_then_cancel(
                    recorder.record_finish(
                        status="failed",
                        reason="doom loop",
                        summary=progress.last_text or None,
                        error_message=screened.stop_error,
                    )
                )
            progress.results = {}
            results = await self._run_calls(recorder.run, screened.calls, progress.results)
            tool_content = await _complete_then_cancel(
                recorder.record_tool_results(step=step, results=results)
            )
            contents.append(tool_content)
            return _NEXT_STEP

    async def _wrap_up(
        self,
        recorder: RunRecorder,
        progress: _Progress,
        turn: _Turn,
        *,
        kind: events.SafetyKindName,
        note: str,
        message: str,
        details: dict[str, Any],
    ) -> RunRecord | None:
        """The soft stop (step limit, global cap, timeout): answer what is still open, ask
        for a summary with tools disabled within the grace period, end ``paused``."""
        run = recorder.run
        step = progress.step
        if recorder.open_calls:
            why = f"interrupted: the run's deadline passed while this call was running ({kind})"
            results = [
                progress.results.get(c.tool_call_id) or interrupted_call_result(c, why)
                for c in recorder.open_calls
            ]
            await _complete_then_cancel(recorder.record_tool_results(step=step, results=results))
        # The conversation as persisted: a cut-off step may have recorded more than the
        # in-memory list holds.
        _system, contents = await load_conversation(
            self.pool, project_id=run.project_id, run_id=run.id
        )
        request = types.Content(role="user", parts=[types.Part(text=note)])
        safety = events.Safety(
            agent_name=run.agent_name, kind=kind, message=message, details=details, step=step
        )
        await _complete_then_cancel(
            recorder.record_note(step=step, batch=[safety], user_message=request)
        )
        contents.append(request)
        summary = progress.last_text or None
        reason = f"{kind}: summary given"
        try:
            async with asyncio.timeout(self.timeout_grace_s):
                reply = await self.model.generate(
                    model=turn.model,
                    system_instruction=turn.system,
                    contents=contents,
                    tools=[],
                    config=turn.config,
                )
        except (TimeoutError, ModelError) as exc:
            log.warning("summary_not_given", kind=kind, error=str(exc) or type(exc).__name__)
            reason = f"{kind}: no summary within {self.timeout_grace_s:g}s; partial output kept"
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
            await _complete_then_cancel(
                recorder.record_model_reply(
                    step=step, reply=reply, calls=calls, count_step=False, extra_events=extra
                )
            )
            if calls:
                await _complete_then_cancel(
                    recorder.record_tool_results(
                        step=step, results=[refused_result(c) for c in calls]
                    )
                )
                reason = f"{kind}: function call after the soft stop refused"
        return await _complete_then_cancel(
            recorder.record_finish(status="paused", reason=reason, summary=summary)
        )

    async def _at_boundary(
        self,
        run: RunRecord,
        control: RunControl,
        progress: _Progress,
        contents: Sequence[types.Content],
    ) -> StopRun | None:
        if control.draining:
            raise _Released
        boundary = StepBoundary(
            run=run, next_step=progress.step + 1, contents=contents, last_text=progress.last_text
        )
        for hook in self.step_hooks:
            decision = await hook(boundary)
            if decision is not None:
                return decision
        return None

    async def _run_calls(
        self, run: RunRecord, planned: Sequence[PlannedCall], done: dict[str, CallResult]
    ) -> list[CallResult]:
        """Runs the calls concurrently; results in the order of the calls. Each result is
        also put in ``done`` as soon as it exists."""
        results: list[CallResult | None] = [None] * len(planned)

        async def run_one(index: int, call: PlannedCall) -> None:
            results[index] = done[call.tool_call_id] = await self._run_call(run, call)

        async with asyncio.TaskGroup() as group:
            for index, call in enumerate(planned):
                group.create_task(run_one(index, call))
        return [r for r in results if r is not None]

    async def _run_call(self, run: RunRecord, call: PlannedCall) -> CallResult:
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

    async def _stop(
        self,
        recorder: RunRecorder,
        progress: _Progress,
        status: RunStatus,
        reason: str,
        *,
        error: str | None,
        summary: str | None = None,
    ) -> RunRecord | None:
        """Answers the calls still open, then ends the run with ``status``."""
        if recorder.open_calls:
            why = f"{status}: {reason}"
            await recorder.record_tool_results(
                step=progress.step,
                results=[interrupted_result(c, why) for c in recorder.open_calls],
            )
        return await recorder.record_finish(
            status=status,
            reason=reason,
            summary=summary if summary is not None else (progress.last_text or None),
            error_message=error,
        )


async def _complete_then_cancel(write: Coroutine[Any, Any, T] | Awaitable[T]) -> T:
    """Lets a bookkeeping write finish even if the run is cancelled meanwhile, then lets
    the cancellation through: the rows and the in-memory state never disagree."""
    task = asyncio.ensure_future(write)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        if not task.done():
            # The write is short and bounded by the database; the caller is cancelled
            # right after it.
            await asyncio.wait([task])
        raise


def _parent_context(trace_id: str | None) -> Any:
    """A context that puts the run span in the trace of the request that queued it."""
    if not trace_id:
        return None
    try:
        trace_int = int(trace_id, 16)
    except ValueError:
        return None
    parent = SpanContext(
        trace_id=trace_int,
        span_id=random.getrandbits(64) or 1,
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )
    return trace.set_span_in_context(NonRecordingSpan(parent))


def _error_message(exc: BaseException) -> str:
    if isinstance(exc, AgentFleetError):
        text = str(exc)
        return text or exc.message
    return f"internal error: {type(exc).__name__}: {exc}"
