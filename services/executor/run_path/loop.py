"""The agent loop (DESIGN §4): one model call per step, the reply persisted before any tool
runs, its function calls run concurrently through the :class:`ToolGateway` (coordination
tools through the :class:`Coordinator`), their results persisted and fed back, until the
model answers with text alone. Flow definitions (sequential, loop, parallel) are handed to
the :class:`FlowRunner` instead: they make no model call.

Outcomes: ``completed`` (summary = final text), ``failed`` (error_message), ``cancelled``
(summary = last model text) when :meth:`RunControl.cancel` was called before the task was
cancelled, ``paused`` after a soft stop (:mod:`soft_stop`). A task cancelled without a
recorded reason (shutdown) or a lost lease leaves the run ``running`` for crash recovery.
A run that ends leaves no child running: its queued and running descendants are cancelled.

An execution: :mod:`run_position` positions it (the run's start, or its continuation),
:mod:`step` runs each step, :mod:`persistence` records every moment (through
:mod:`run_writes`), :mod:`soft_stop` ends it at a limit; this module drives them.

Seams for the safety layers: every :class:`StepHook` is consulted at each step boundary and
may stop the run with a :class:`StopRun`; :class:`RunControl` records why a run is stopped
before its task is cancelled.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg
import structlog
from google.genai import types
from opentelemetry import trace

from agentfleet.errors import AgentFleetError, FailedPrecondition
from agentfleet.events import RunEventNotifier
from agentfleet.llm import ModelClient
from agentfleet.observability import metrics
from agentfleet.observability.loop_watch import doing
from agentfleet.observability.telemetry import current_trace_id
from agentfleet.run_limits import may_spawn
from services.executor.calls import CallResult, PlannedCall
from services.executor.control import (
    DefinitionSource,
    RunControl,
    StepBoundary,
    StepHook,
    StopRun,
    run_definition,
)
from services.executor.coordination.coordination import Coordinator
from services.executor.coordination.flows import FlowDeadline, FlowRunner
from services.executor.coordination.tree import ACTIVE, cancel_descendants
from services.executor.loop_state import Progress, Turn, run_span_context
from services.executor.model.budgets import BudgetStore, pause_if_over_budget
from services.executor.model.model_request import (
    function_tools,
    generation_config,
    interrupted_call_result,
    interrupted_result,
)
from services.executor.model.outages import is_outage
from services.executor.output_schema import with_schema_without_tools
from services.executor.registry.definitions import AgentDefinition
from services.executor.run_path.recovery import INTERRUPTED_BY_CRASH, Continuation
from services.executor.run_path.run_position import (
    load_position,
    open_calls_for_stop,
    open_flow_run,
    open_run,
)
from services.executor.run_path.soft_stop import SoftStop, soft_stop_due, wrap_up
from services.executor.run_path.step import StepRunner
from services.executor.runs import RunRecord, RunStatus
from services.executor.safety import (
    DEFAULT_TIMEOUT_GRACE_S,
    TIMEOUT_MESSAGE,
    StepBudget,
    effective_max_steps,
    execution_timeout_s,
)
from services.executor.store.group_commit import GroupCommit
from services.executor.store.persistence import LeaseLost, RunRecorder, complete_then_cancel
from services.executor.tools.tool_gateway import ToolGateway

__all__ = ["AgentLoop", "DefinitionSource", "RunControl", "StepBoundary", "StepHook", "StopRun"]

log = structlog.get_logger(__name__)
_tracer = trace.get_tracer("agentfleet.executor")


class _Released(Exception):
    """The loop stopped at a step boundary while draining; the run stays ``running``."""


@dataclass(kw_only=True, slots=True)
class AgentLoop:
    """Executes claimed runs; one instance serves every run of a worker."""

    pool: asyncpg.Pool
    definitions: DefinitionSource
    tools: ToolGateway
    model: ModelClient
    owner: str
    """Lease owner name of the worker (host:pid:...)."""
    step_hooks: Sequence[StepHook] = ()
    tool_timeout_s: float | None = None
    timeout_grace_s: float = DEFAULT_TIMEOUT_GRACE_S
    """After a run's deadline, how long the model gets to summarize (no tools)."""
    coordinator: Coordinator | None = None
    """Runs list_available_agents, spawn_agents and exit_loop; None: they are not offered."""
    flows: FlowRunner | None = None
    """Runs sequential, loop and parallel definitions; None: such runs fail."""
    notifier: RunEventNotifier | None = None
    """Notifies followers of the runs' writes (the process's one); None: each run's own."""
    group_commit: GroupCommit | None = None
    """Commits concurrent runs' step writes together (the process's one); None: each run's
    own (no grouping)."""

    async def execute(self, run: RunRecord, control: RunControl) -> RunRecord | None:
        """Runs the claimed ``run`` to its end; the final row, or None when the run was left
        ``running`` (draining, or the lease was lost)."""
        recorder = RunRecorder(
            self.pool, run, owner=self.owner, notifier=self.notifier, group=self.group_commit
        )
        progress = Progress(tokens_at_start=run.tokens_in + run.tokens_out)
        if control.never_started:
            progress.position = Continuation()  # nothing persisted yet: no read
        with (
            structlog.contextvars.bound_contextvars(run_id=run.id, project_id=run.project_id),
            doing(f"run {run.id} project {run.project_id}"),
            _tracer.start_as_current_span(
                f"invoke_agent {run.agent_name}",
                context=run_span_context(run),
                attributes={
                    "gen_ai.operation.name": "invoke_agent",
                    "gen_ai.agent.name": run.agent_name,
                    "agentfleet.run_id": run.id,
                    "agentfleet.project_id": run.project_id,
                    "agentfleet.run.depth": run.depth,
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
                finished = await complete_then_cancel(
                    self._stop(recorder, progress, "cancelled", reason, error=None)
                )
            except _Released:
                log.info("run_released", step=progress.step)
                return None
            except LeaseLost as exc:
                log.warning("run_lease_lost", error=exc.message)
                return None
            except Exception as exc:
                if control.retry_outages and is_outage(exc):
                    raise  # the worker runs it again once the database is back
                message = _error_message(exc)
                if not isinstance(exc, AgentFleetError):
                    log.exception("run_crashed", error=message)
                span.set_status(trace.Status(trace.StatusCode.ERROR, message))
                finished = await complete_then_cancel(
                    self._stop(recorder, progress, "failed", "run failed", error=message)
                )
            if finished is not None:
                span.set_attribute("agentfleet.run.status", finished.status)
                metrics.record_run_finished(
                    agent=run.agent_name, status=finished.status, duration_ms=finished.duration_ms
                )
                log.info("run_finished", status=finished.status, steps=finished.step_count)
                if not progress.childless:
                    await complete_then_cancel(self._end_children(finished))
            return finished

    async def _end_children(self, run: RunRecord) -> None:
        """A run that ended leaves no descendant queued or running (nobody would wait for
        it): cancel them, on whichever executor they run. Paused ones stay resumable."""
        if self.coordinator is None or not may_spawn(run.depth):
            return
        try:
            await cancel_descendants(
                self.coordinator.children.queue,
                self.pool,
                run.project_id,
                run.id,
                f"ancestor run {run.id} ended {run.status}",
                statuses=ACTIVE,
            )
        except (asyncpg.PostgresError, OSError, AgentFleetError) as exc:
            log.warning("descendants_not_cancelled", error=str(exc))

    async def _drive(
        self, run: RunRecord, recorder: RunRecorder, control: RunControl, progress: Progress
    ) -> RunRecord | None:
        definition = control.definition or await run_definition(self.definitions, run)
        if definition.flow_type != "single":
            return await self._drive_flow(run, definition, recorder, control, progress)
        resolved = await self.tools.resolve(
            project_id=run.project_id, patterns=definition.tools, depth=run.depth
        )
        callable_tools = {
            t.name: t
            for t in resolved
            if self.coordinator is not None or not t.executed_by_executor
        }
        progress.childless = control.never_started and not any(
            t.executed_by_executor for t in callable_tools.values()
        )
        turn = Turn(
            model=definition.model.name,
            fallback_models=definition.model.fallback_models,
            fallback_wait_s=definition.model.fallback_wait_s,
            system=definition.system_prompt or None,
            tools=function_tools(list(callable_tools.values())),
            config=with_schema_without_tools(
                generation_config(definition.model), definition.output_schema, callable_tools
            ),
        )
        steps = StepRunner(
            pool=self.pool,
            model=self.model,
            tools=self.tools,
            owner=self.owner,
            tool_timeout_s=self.tool_timeout_s,
            coordinator=self.coordinator,
        )

        async def run_calls(calls: Sequence[PlannedCall]) -> list[CallResult]:
            return await steps.run_calls(recorder.run, definition, calls, {})

        position = await load_position(self.pool, run, progress)
        contents = await open_run(
            pool=self.pool,
            recorder=recorder,
            progress=progress,
            position=position,
            definition=definition,
            turn=turn,
            tool_names=sorted(callable_tools),
            resumed=control.resumed,
            worker=self.owner,
            run_calls=run_calls,
            can_reattach=self.coordinator is not None,
        )
        if position.final_text is not None:
            # The model had answered; only the run's ending was lost with its worker.
            answered = steps.answered(recorder, progress, turn, contents, definition)
            return await answered.finish_recovered(position.final_text)
        budget = StepBudget(
            max_steps=effective_max_steps(
                requested=run.max_steps, definition=definition.max_steps, depth=run.depth
            ),
            total_steps_at_start=run.total_steps,
            steps_at_start=run.step_count,
        )
        timeout_s = execution_timeout_s(run, definition)
        # The clock starts when this worker begins executing (fresh, resumed or recovered).
        deadline = None if timeout_s is None else asyncio.get_running_loop().time() + timeout_s
        log.info("run_started", agent=run.agent_name, tools=len(callable_tools))
        while True:
            stop = await self._at_boundary(recorder.run, control, progress, contents)
            if stop is not None:
                return await complete_then_cancel(
                    self._stop(
                        recorder,
                        progress,
                        stop.status,
                        stop.reason,
                        error=stop.error_message,
                        summary=stop.summary,
                    )
                )
            soft = soft_stop_due(recorder.run, budget, progress)
            if soft is not None:
                return await self._wrap_up(recorder, progress, turn, soft)
            paused, row = await pause_if_over_budget(
                BudgetStore(self.pool), recorder, step=progress.step, summary=progress.last_text
            )
            if paused:
                return row
            steps_before = recorder.run.step_count
            try:
                async with asyncio.timeout_at(deadline) as scope:
                    step = await steps.run(
                        recorder, definition, progress, turn, contents, callable_tools
                    )
            except TimeoutError:
                if not scope.expired():
                    raise
                assert timeout_s is not None  # only a deadline expires
                if recorder.run.step_count == steps_before:
                    # Cut before its reply was recorded: the model call was in flight.
                    await recorder.record_cut_call()
                return await self._wrap_up(
                    recorder,
                    progress,
                    turn,
                    SoftStop(
                        kind="timeout",
                        note=TIMEOUT_MESSAGE,
                        message=(
                            f"timeout of {timeout_s:g}s reached: in-flight call cancelled, "
                            f"summary requested within {self.timeout_grace_s:g}s"
                        ),
                        details={"timeout_s": timeout_s, "grace_s": self.timeout_grace_s},
                    ),
                )
            if step.ended:
                return step.run

    async def _drive_flow(
        self,
        run: RunRecord,
        definition: AgentDefinition,
        recorder: RunRecorder,
        control: RunControl,
        progress: Progress,
    ) -> RunRecord | None:
        """A sequential, loop or parallel run: its members run as child runs."""
        if self.flows is None:
            raise _FlowsUnavailable(f"flow_type {definition.flow_type!r} is not available here")
        await open_flow_run(
            recorder=recorder,
            position=await load_position(self.pool, run, progress),
            model_name=f"flow:{definition.flow_type}",
            resumed=control.resumed,
            worker=self.owner,
        )
        timeout_s = execution_timeout_s(run, definition)
        deadline = None if timeout_s is None else FlowDeadline.after(timeout_s)
        outcome = await self.flows.run(recorder.run, definition, progress, deadline)
        return await recorder.record_finish(
            status=outcome.status,
            reason=outcome.reason,
            summary=outcome.summary,
            error_message=outcome.error_message,
            extra_events=[outcome.safety] if outcome.safety is not None else (),
        )

    async def _wrap_up(
        self, recorder: RunRecorder, progress: Progress, turn: Turn, stop: SoftStop
    ) -> RunRecord | None:
        return await wrap_up(
            pool=self.pool,
            model=self.model,
            grace_s=self.timeout_grace_s,
            recorder=recorder,
            progress=progress,
            turn=turn,
            stop=stop,
        )

    async def _at_boundary(
        self,
        run: RunRecord,
        control: RunControl,
        progress: Progress,
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

    async def _stop(
        self,
        recorder: RunRecorder,
        progress: Progress,
        status: RunStatus,
        reason: str,
        *,
        error: str | None,
        summary: str | None = None,
    ) -> RunRecord | None:
        """Answers the calls still open, then ends the run with ``status``."""
        why = f"{status}: {reason}"
        left_by_crash = (
            set() if recorder.started else await open_calls_for_stop(self.pool, recorder, progress)
        )
        if recorder.open_calls:
            await recorder.record_tool_results(
                step=progress.step,
                results=[
                    interrupted_call_result(c, f"{INTERRUPTED_BY_CRASH} Then the run {why}")
                    if c.tool_call_id in left_by_crash
                    else interrupted_result(c, why)
                    for c in recorder.open_calls
                ],
            )
        return await recorder.record_finish(
            status=status,
            reason=reason,
            summary=summary if summary is not None else (progress.last_text or None),
            error_message=error,
        )


class _FlowsUnavailable(FailedPrecondition):
    """A flow definition reached a loop built without a FlowRunner."""


def _error_message(exc: BaseException) -> str:
    if isinstance(exc, AgentFleetError):
        text = str(exc)
        return text or exc.message
    return f"internal error: {type(exc).__name__}: {exc}"
