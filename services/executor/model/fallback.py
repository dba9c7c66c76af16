"""Fallback models (issue #31): a definition's ``model.fallback_models`` answer a step when
the model before them keeps failing.

A model "keeps failing" when it answered 5xx, overloaded or nothing on every attempt of the
retry policy (:class:`~agentfleet.llm.errors.TransientModelError` other than a plain 429), or
when its quota will not let it answer in time: the limiter's expected wait for it passes the
call's bound (the definition's ``model.fallback_wait_s``, else the maximum wait), or the call
waited that long (:class:`~agentfleet.llm.errors.QuotaWaitTooLong`), or the day's requests are
spent (:class:`~agentfleet.llm.errors.QuotaWaitExceeded`). A plain 429 is the
quota's business (wait for it), and a 4xx is the request's fault: the same request would fail
on the next model too, so neither switches. The reply says which model answered and why the
others did not; the recorder stores the model on the message and emits a SAFETY
``model_fallback`` event. Structured output and tools are in the request, which is sent
unchanged to the next model.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace

from agentfleet.llm import ModelReply
from agentfleet.llm.errors import (
    ModelError,
    QuotaWaitExceeded,
    QuotaWaitTooLong,
    TransientModelError,
)
from agentfleet.observability import metrics


def falls_back_on(error: ModelError) -> bool:
    """Whether ``error`` (retries spent) sends the call to the next model."""
    if isinstance(error, QuotaWaitTooLong | QuotaWaitExceeded):
        # Its quota will not let it answer in time (the bound, the maximum wait, or the
        # day's requests spent): another model's quota may.
        return True
    return isinstance(error, TransientModelError) and error.status_code != 429


async def with_fallbacks(
    call: Callable[[str], Awaitable[ModelReply]], models: Sequence[str]
) -> ModelReply:
    """``call(model)`` for each of ``models`` in turn until one answers; the last model's
    error when none does. The reply names the model that answered and why the ones before
    it did not."""
    failures: list[str] = []
    for index, model in enumerate(models):
        try:
            reply = await call(model)
        except ModelError as exc:
            if index == len(models) - 1 or not falls_back_on(exc):
                raise
            failures.append(f"{model}: {exc}")
            metrics.record_model_fallback(failed_model=model, model=models[index + 1])
            continue
        if not failures:
            return reply if reply.model else replace(reply, model=model)
        return replace(reply, model=reply.model or model, fallback_reason="; ".join(failures))
    raise ValueError("with_fallbacks needs at least one model")
