"""State one execution of a run carries from step to step, shared by the agent loop and
the modules that end or continue it (:mod:`soft_stop`, :mod:`continuation`)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, TypeVar

from google.genai import types
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from services.executor.calls import CallResult
from services.executor.run_path.recovery import Continuation
from services.executor.runs import RunRecord
from services.executor.safety import DoomLoopDetector

T = TypeVar("T")


@dataclass(kw_only=True, slots=True)
class Progress:
    """Where the execution stands."""

    last_text: str = ""
    step: int = 0
    used_ids: set[str] = field(default_factory=set)
    detector: DoomLoopDetector = field(default_factory=DoomLoopDetector)
    results: dict[str, CallResult] = field(default_factory=dict)
    """Results of the current step's calls as they finish (kept when a timeout cuts it)."""
    tokens_at_start: int = 0
    """tokens_in + tokens_out when this execution began (the token budget counts from it)."""
    position: Continuation | None = None
    """The run's persisted position, once read (:func:`run_position.load_position`)."""
    childless: bool = False
    """Set when the run cannot have children: it never executed before and is offered no
    coordination tool (spawn_agents). Its end then looks for no descendants to cancel."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Turn:
    """What every model call of the run sends besides the conversation."""

    model: str
    system: str | None
    tools: list[types.Tool]
    config: types.GenerateContentConfig
    fallback_models: tuple[str, ...] = ()
    """Tried in order when ``model`` keeps failing (:mod:`services.executor.model.fallback`)."""
    fallback_wait_s: float | None = None
    """With fallbacks: the longest a call waits for a model's quota before the next one
    (None: the executor's maximum quota wait)."""


def run_span_context(run: RunRecord) -> Any:
    """The context of the run span: below the span that spawned the run (a child, from its
    stored traceparent), else in the trace of the request that queued it."""
    if run.trace_parent:
        return TraceContextTextMapPropagator().extract({"traceparent": run.trace_parent})
    if not run.trace_id:
        return None
    try:
        trace_int = int(run.trace_id, 16)
    except ValueError:
        return None
    parent = SpanContext(
        trace_id=trace_int,
        span_id=random.getrandbits(64) or 1,
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )
    return trace.set_span_in_context(NonRecordingSpan(parent))
