"""Picking up a run that already has a conversation: after a crash (another worker took
over its expired lease) or after ResumeRun (DESIGN §4).

The run's RUN_STARTED says which; every call its previous worker left ``started`` gets an
``interrupted`` answer and is never run again -- except ``spawn_agents``, whose children
were persisted at spawn time: the call re-attaches to them (waits for the same child runs)
instead of spawning anew, so its answer is the children's real results.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import structlog
from google.genai import types

from agentfleet import events
from services.executor.calls import CallResult, PlannedCall
from services.executor.loop_state import Progress, Turn
from services.executor.model.model_request import interrupted_call_result
from services.executor.run_path.recovery import INTERRUPTED_BY_CRASH, Continuation
from services.executor.store.persistence import RunRecorder

log = structlog.get_logger(__name__)

Reattach = Callable[[Sequence[PlannedCall]], Awaitable[list[CallResult]]]
"""Runs the re-attachable open calls again (they must be idempotent); results in order."""

REATTACHABLE_TOOLS = frozenset({"spawn_agents"})
"""Executor tools whose effects are keyed by their tool_call_id, so running them again
re-attaches rather than repeats."""


def is_reattachable(call: PlannedCall) -> bool:
    return call.source == "executor" and call.tool_name in REATTACHABLE_TOOLS


async def continue_run(
    *,
    recorder: RunRecorder,
    progress: Progress,
    continuation: Continuation,
    turn: Turn,
    tool_names: Sequence[str],
    resumed: bool,
    worker: str,
    reattach: Reattach | None,
) -> list[types.Content]:
    """Positions ``recorder`` and ``progress`` on the persisted run, records RUN_STARTED
    (recovered or resumed) and answers the open calls; returns the conversation."""
    run = recorder.run
    recorder.continue_at(
        next_message_seq=continuation.next_message_seq, open_calls=continuation.open_calls
    )
    progress.step = continuation.step
    progress.last_text = continuation.last_text
    progress.used_ids.update(continuation.used_ids)
    if not resumed:
        # Same execution on another worker: the doom-loop count carries over.
        for name, arguments in continuation.past_calls:
            progress.detector.observe(name, arguments)
    started = events.RunStarted(
        agent_name=run.agent_name,
        model_name=turn.model,
        tool_names=tuple(tool_names),
        recovered=not resumed,
        resumed=resumed,
        worker=worker,
    )
    await recorder.record_note(step=progress.step, batch=[started])
    log.info("run_continued", resumed=resumed, open_calls=len(recorder.open_calls))
    contents = list(continuation.contents)
    open_calls = list(recorder.open_calls)
    if not open_calls:
        return contents
    again = [c for c in open_calls if reattach is not None and is_reattachable(c)]
    by_id = (
        dict(zip((c.tool_call_id for c in again), await reattach(again), strict=True))
        if (again and reattach is not None)
        else {}
    )
    results = [
        by_id.get(c.tool_call_id) or interrupted_call_result(c, INTERRUPTED_BY_CRASH)
        for c in open_calls
    ]
    contents.append(await recorder.record_tool_results(step=progress.step, results=results))
    return contents
