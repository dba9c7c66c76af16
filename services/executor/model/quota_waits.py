"""A run's model calls waiting for their model's quota, as the run shows it (issue 31).

The model client tells a call's ``on_wait`` (:data:`agentfleet.llm.QuotaWaitSink`) when the
call starts waiting for the model's quota (a 429's backoff, the fleet's shared limiter) and
when it stops. :class:`QuotaWaitReporter` is that sink for one model call of a run: each
start and end becomes a MODEL_QUOTA_WAIT event and the run's ``waiting_for`` (set, then
cleared), written in one statement while the worker holds the lease, and the quota metrics.
The run's status stays ``running`` throughout.

What the limiter (or the server behind it) reports is bounded here before it is stored: a
model name that is not a model id becomes the call's own model, a limit that is not a
plain name becomes ``rate_limit``, an expected wait that is not a finite number of seconds
in [0, a day] is clamped.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from agentfleet import events
from agentfleet.llm import QuotaWait
from agentfleet.llm.genai_translate import RATE_LIMIT
from agentfleet.observability import metrics
from services.executor.model.model_request import NAME_SCHEMA
from services.executor.registry.manifest_schema import schema_violations
from services.executor.store.persistence import RunRecorder

MAX_EXPECTED_WAIT_S = 86_400.0
"""The longest expected wait a run shows (a day: Gemini's longest window)."""
_LIMIT_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")


class QuotaWaitReporter:
    """The ``on_wait`` of one model call of a run (step ``step``); not shared."""

    def __init__(self, recorder: RunRecorder, *, step: int, model: str) -> None:
        self._recorder = recorder
        self._step = step
        self._model = model
        """The model the call asks for: shown when the report names no valid one."""
        self._waiting: events.ModelQuotaWait | None = None
        """The start of the wait in progress; None when the call is not waiting."""
        self._started = 0.0
        """time.monotonic() of that start."""

    async def __call__(self, wait: QuotaWait) -> None:
        if wait.waiting:
            await self._start(wait)
        else:
            await self.end()

    async def _start(self, wait: QuotaWait) -> None:
        model = wait.model if _is_model_id(wait.model) else self._model
        expected_s = _bounded_wait_s(wait.expected_wait_s)
        limit = wait.limit if _LIMIT_NAME.fullmatch(wait.limit) else RATE_LIMIT
        event = events.ModelQuotaWait(
            agent_name=self._recorder.run.agent_name,
            waiting=True,
            model=model,
            limit=limit,
            expected_wait_s=expected_s,
            step=self._step,
            message=events.quota_wait_message(model, expected_s),
        )
        if self._waiting is None:
            # A new estimate of a wait in progress is a new start: the run shows the
            # latest; the gauge counts the call once.
            metrics.quota_wait_started(model=model)
            self._started = time.monotonic()
        self._waiting = event
        await self._recorder.record_quota_wait(
            event, quota_wait={"model": model, "limit": limit, "expected_wait_s": expected_s}
        )

    async def end(self) -> None:
        """Ends the wait in progress, if any (a report of an end without a start is
        ignored)."""
        started = self._waiting
        if started is None:
            return
        self._waiting = None
        waited_s = time.monotonic() - self._started
        metrics.quota_wait_ended(model=started.model, waited_s=waited_s)
        await self._recorder.record_quota_wait(
            events.ModelQuotaWait(
                agent_name=started.agent_name,
                waiting=False,
                model=started.model,
                limit=started.limit,
                expected_wait_s=started.expected_wait_s,
                step=started.step,
                waited_s=round(waited_s, 3),
                message=f"model quota wait over: {started.model}, waited {waited_s:.1f} s",
            ),
            quota_wait=None,
        )


@asynccontextmanager
async def quota_waits(
    recorder: RunRecorder, *, step: int, model: str
) -> AsyncIterator[QuotaWaitReporter]:
    """A reporter for one model call; a wait the model client left open when the call
    ended (an error, a cancellation) is ended then, so the run never shows a stale wait."""
    reporter = QuotaWaitReporter(recorder, step=step, model=model)
    try:
        yield reporter
    finally:
        await reporter.end()


def _is_model_id(name: str) -> bool:
    return not schema_violations(name, "model", definition=NAME_SCHEMA)


def _bounded_wait_s(seconds: float) -> float:
    """``seconds`` within [0, :data:`MAX_EXPECTED_WAIT_S`]; 0 for what is not a number."""
    if not isinstance(seconds, int | float) or math.isnan(seconds):
        return 0.0
    return round(min(max(float(seconds), 0.0), MAX_EXPECTED_WAIT_S), 3)
