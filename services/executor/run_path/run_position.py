"""Where an execution of a run begins (DESIGN §4): the run's persisted position is read
once (:func:`load_position`); a run with a conversation continues from it (crash
recovery, ResumeRun, a step held for approval whose calls were decided), a new run
records its start. A run stopped before it was positioned still finds there the calls a
dead worker left open (:func:`open_calls_for_stop`)."""

from __future__ import annotations

import dataclasses

import asyncpg
from google.genai import types

from agentfleet import events
from agentfleet.observability.telemetry import current_trace_id
from services.executor.approvals.approval_resume import begin_held_continuation, settle_held_step
from services.executor.loop_state import Progress, Turn
from services.executor.registry.definitions import AgentDefinition
from services.executor.run_path.continuation import Reattach, continue_run
from services.executor.run_path.recovery import Continuation, load_continuation
from services.executor.runs import RunRecord
from services.executor.store.persistence import RunRecorder, complete_then_cancel
from services.executor.threads import parse_thread_policy, thread_history


async def load_position(pool: asyncpg.Pool, run: RunRecord, progress: Progress) -> Continuation:
    """The run's persisted conversation and open calls, read once per execution. Each
    caller gets its own copy: taking a held step's calls out of one leaves the others'."""
    if progress.position is None:
        progress.position = await load_continuation(pool, run)
    return dataclasses.replace(progress.position, open_calls=list(progress.position.open_calls))


async def open_run(
    *,
    pool: asyncpg.Pool,
    recorder: RunRecorder,
    progress: Progress,
    position: Continuation,
    definition: AgentDefinition,
    turn: Turn,
    tool_names: list[str],
    resumed: bool,
    worker: str,
    run_calls: Reattach,
    can_reattach: bool,
) -> list[types.Content]:
    """Positions ``recorder`` and ``progress`` on the run and returns the conversation the
    next step sends. ``run_calls`` runs a decided held step's calls; with ``can_reattach``
    it also re-attaches a continued run's open spawn_agents calls."""
    run = recorder.run
    # A step held for approval whose calls are decided: settled below, all together.
    held_step = await begin_held_continuation(pool, recorder, position)
    if not position.has_messages:
        # A thread's run starts from the thread's previous completed run (threads.py).
        history = await thread_history(pool, run, parse_thread_policy(definition.config))
        contents = [
            *(content for _role, content in history),
            types.Content(role="user", parts=[types.Part(text=run.input)]),
        ]
        await recorder.record_start(
            system_prompt=definition.system_prompt,
            user_input=contents[-1],
            model_name=definition.model.name,
            tool_names=tool_names,
            trace_id=current_trace_id(),
            history=history,
        )
        return contents
    contents = await continue_run(
        recorder=recorder,
        progress=progress,
        continuation=position,
        turn=turn,
        tool_names=tool_names,
        resumed=resumed or held_step is not None,
        worker=worker,
        reattach=run_calls if can_reattach else None,
    )
    if held_step is not None:
        contents.append(
            await complete_then_cancel(
                settle_held_step(
                    pool=pool,
                    recorder=recorder,
                    continuation=position,
                    rows=held_step,
                    run_calls=run_calls,
                )
            )
        )
    return contents


async def open_flow_run(
    *,
    recorder: RunRecorder,
    position: Continuation,
    model_name: str,
    resumed: bool,
    worker: str,
) -> None:
    """Positions ``recorder`` on a flow run (its members are child runs: no conversation
    to continue): RUN_STARTED of a continued run, else the run's start."""
    run = recorder.run
    if not position.has_messages:
        await recorder.record_start(
            system_prompt="",
            user_input=types.Content(role="user", parts=[types.Part(text=run.input)]),
            model_name=model_name,
            tool_names=(),
            trace_id=current_trace_id(),
        )
        return
    recorder.continue_at(next_message_seq=position.next_message_seq, open_calls=[])
    started = events.RunStarted(
        agent_name=run.agent_name,
        model_name=model_name,
        recovered=not resumed,
        resumed=resumed,
        worker=worker,
    )
    await recorder.record_note(step=0, batch=[started])


async def open_calls_for_stop(
    pool: asyncpg.Pool, recorder: RunRecorder, progress: Progress
) -> set[str]:
    """For a run stopped before this execution positioned it (e.g. cancelled as soon as it
    took over a crashed worker's run): positions ``recorder`` on it and returns the ids of
    the calls the dead worker left ``started``, so they still get their answers before the
    run ends."""
    position = await load_position(pool, recorder.run, progress)
    if not position.has_messages:
        return set()
    recorder.continue_at(next_message_seq=position.next_message_seq, open_calls=position.open_calls)
    progress.step = position.step
    progress.last_text = progress.last_text or position.last_text
    return {c.tool_call_id for c in position.open_calls}
