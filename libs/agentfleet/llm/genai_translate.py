"""google-genai answers and errors in our terms: a response becomes a :class:`ModelReply`,
an SDK or transport error a :class:`ModelError`, and a failed attempt a backoff delay.

Shared by the plain calls (:mod:`agentfleet.llm.genai_client`) and the streamed ones
(:mod:`agentfleet.llm.genai_stream`), so both retry and fail the same way.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import re
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pydantic
import structlog
from google.genai import errors as genai_errors
from google.genai import types

from agentfleet.llm.client import ModelReply, RetryPolicy, TokenUsage
from agentfleet.llm.errors import (
    MalformedModelReply,
    ModelError,
    ModelRequestError,
    TransientModelError,
)
from agentfleet.llm.limiter.quota_wait import QuotaWait, QuotaWaitSink
from agentfleet.observability import metrics

_log = structlog.get_logger(__name__)


def translate_error(exc: Exception, policy: RetryPolicy, *, attempts: int) -> ModelError | None:
    """The :class:`ModelError` for a google-genai or transport error; None if foreign."""
    if isinstance(exc, genai_errors.APIError):
        code = int(exc.code) if exc.code else None
        message = exc.message or str(exc)
        if code is not None and code in policy.retry_statuses:
            return TransientModelError(message, status_code=code, attempts=attempts)
        if code is not None and 400 <= code < 500:
            return ModelRequestError(message, status_code=code, attempts=attempts)
        return ModelError(message, status_code=code, attempts=attempts)
    if isinstance(exc, RecursionError):
        # A reply nested deeper than the JSON decoder goes (a hostile or broken server).
        return MalformedModelReply(
            "model reply is nested too deeply to decode", status_code=200, attempts=attempts
        )
    if isinstance(
        exc, json.JSONDecodeError | genai_errors.UnknownApiResponseError | pydantic.ValidationError
    ):
        return MalformedModelReply(
            f"model reply is not valid JSON: {_shorten(str(exc))}",
            status_code=200,
            attempts=attempts,
        )
    # No CancelledError here: it is a BaseException and must always propagate.
    if isinstance(exc, aiohttp.ClientError | TimeoutError | ConnectionError):
        return TransientModelError(
            f"connection to the model failed: {exc!r}", status_code=None, attempts=attempts
        )
    return None


async def with_retries(
    attempt_once: Callable[[], Awaitable[types.GenerateContentResponse]],
    policy: RetryPolicy,
    *,
    model: str,
    call: str = "model call",
    on_wait: QuotaWaitSink | None = None,
    on_throttled: Callable[[float | None, str | None], Awaitable[None]] | None = None,
) -> ModelReply:
    """The reply of the first attempt that answers, retried per ``policy``; an attempt whose
    error carries a true ``delta_sent`` (a streamed call that already handed pieces on) is
    not retried, as a retry would hand them on again. With ``on_throttled`` (the shared
    limiter), a 429 is given to it with its retry hint and retried without counting (the
    limiter tells ``on_wait`` of the wait); without it, the wait after a 429 is still a
    wait for the model's quota, and ``on_wait`` is told when it starts and when it ends."""
    attempt = 0
    while True:
        attempt += 1
        try:
            return reply_from_response(await attempt_once(), attempts=attempt)
        except MalformedModelReply:
            raise
        except Exception as exc:
            limit = quota_limit(exc)
            if limit is not None:
                metrics.record_model_rate_limited(model=model)
            retryable = not getattr(exc, "delta_sent", False)
            if on_throttled is not None and retryable and is_throttled(exc):
                # The quota is the reason: the limiter decides when to go again (bounded by
                # its maximum wait), and the attempt does not count.
                await on_throttled(retry_hint_s(exc), limit)
                attempt -= 1
                continue
            delay = retry_delay(
                exc, policy, attempt=attempt, model=model, retryable=retryable, call=call
            )
            if limit is None or on_wait is None:
                await asyncio.sleep(delay)
            else:
                await reported_wait(on_wait, QuotaWait(model, limit, delay, True))


async def reported_wait(on_wait: QuotaWaitSink, wait: QuotaWait) -> None:
    """Waits ``wait.expected_wait_s``, telling ``on_wait`` when the wait starts and when it
    ends (also when a cancellation cuts it short)."""
    await on_wait(wait)
    try:
        await asyncio.sleep(wait.expected_wait_s)
    finally:
        await on_wait(dataclasses.replace(wait, waiting=False))


def retry_delay(
    exc: Exception,
    policy: RetryPolicy,
    *,
    attempt: int,
    model: str,
    retryable: bool = True,
    call: str = "model call",
) -> float:
    """Seconds to wait before retrying failed ``attempt`` (1-based), logged; otherwise
    raises what the failure means: the :class:`ModelError` it translates to (retries spent,
    not transient, or not ``retryable``), or ``exc`` itself when it is foreign."""
    error = translate_error(exc, policy, attempts=attempt)
    if error is None:
        raise exc
    transient = retryable and isinstance(error, TransientModelError)
    if not transient or attempt >= policy.max_attempts:
        raise error from exc
    delay = backoff_delay(policy, attempt, retry_hint_s(exc))
    _log.warning(
        f"{call} failed, retrying",
        model=model,
        status=error.status_code,
        error=error.message,
        attempt=attempt,
        delay_s=round(delay, 3),
    )
    return delay


def is_throttled(exc: BaseException) -> bool:
    """True for an API error saying the quota is spent (HTTP 429)."""
    return isinstance(exc, genai_errors.APIError) and exc.code == 429


def backoff_delay(policy: RetryPolicy, attempt: int, hint_s: float | None = None) -> float:
    """Seconds to wait after failed ``attempt`` (1-based): exponential with jitter in
    [half, full], raised to the server's retry hint, never over ``max_delay_s``."""
    ceiling = min(policy.max_delay_s, policy.base_delay_s * 2 ** (attempt - 1))
    delay = random.uniform(ceiling / 2, ceiling)
    if hint_s is not None:
        delay = max(delay, hint_s)
    return min(delay, policy.max_delay_s)


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s*$")


def retry_hint_s(exc: BaseException) -> float | None:
    """The ``google.rpc.RetryInfo.retryDelay`` of an API error, in seconds, if it has one."""
    for item in _error_details(exc, "RetryInfo"):
        match = _DURATION.match(str(item.get("retryDelay", "")))
        if match:
            return float(match.group(1))
    return None


_QUOTA_LIMITS = (
    # (words a google.rpc.QuotaFailure quotaId holds, the limit's name), first match wins:
    # Gemini's ids read like "GenerateRequestsPerMinutePerProjectPerModel-FreeTier".
    (("Token", "PerDay"), "tokens_per_day"),
    (("PerDay",), "requests_per_day"),
    (("Token", "PerMinute"), "tokens_per_minute"),
    (("PerMinute",), "requests_per_minute"),
)
RATE_LIMIT = "rate_limit"
"""The limit of a 429 that names none we know."""


def quota_limit(exc: BaseException) -> str | None:
    """Which of the model's quotas a 429 says was exhausted (one of a fixed set of names,
    :data:`RATE_LIMIT` when it names none we know); None for any other error. The server's
    own words never pass through: they are only matched."""
    if not isinstance(exc, genai_errors.APIError) or exc.code != 429:
        return None
    for detail in _error_details(exc, "QuotaFailure"):
        violations = detail.get("violations")
        for violation in violations if isinstance(violations, list) else []:
            quota_id = violation.get("quotaId") if isinstance(violation, dict) else None
            if not isinstance(quota_id, str):
                continue
            for words, limit in _QUOTA_LIMITS:
                if all(word in quota_id for word in words):
                    return limit
    return RATE_LIMIT


def _error_details(exc: BaseException, type_name: str) -> list[dict[str, Any]]:
    """The ``google.rpc`` details of an API error whose ``@type`` ends with ``type_name``."""
    body: Any = getattr(exc, "details", None)
    error = body.get("error") if isinstance(body, dict) else None
    details = error.get("details") if isinstance(error, dict) else None
    return [
        item
        for item in (details if isinstance(details, list) else [])
        if isinstance(item, dict) and str(item.get("@type", "")).endswith(type_name)
    ]


def reply_from_response(response: types.GenerateContentResponse, *, attempts: int) -> ModelReply:
    """The :class:`ModelReply` of a response; no candidate is a :class:`MalformedModelReply`."""
    if not response.candidates:
        feedback = response.prompt_feedback
        reason = feedback.block_reason if feedback is not None else None
        why = f" (prompt blocked: {_enum_text(reason)})" if reason is not None else ""
        raise MalformedModelReply(
            f"model reply has no candidates{why}", status_code=200, attempts=attempts
        )
    candidate = response.candidates[0]
    content = candidate.content or types.Content(role="model", parts=[])
    if content.role is None:
        content = content.model_copy(update={"role": "model"})
    parts = content.parts or []
    return ModelReply(
        content=content,
        text="".join(p.text for p in parts if p.text and not p.thought),
        function_calls=tuple(p.function_call for p in parts if p.function_call is not None),
        finish_reason=_enum_text(candidate.finish_reason),
        usage=_token_usage(response.usage_metadata),
        model_version=response.model_version,
        response_id=response.response_id,
        attempts=attempts,
    )


def _token_usage(usage: types.GenerateContentResponseUsageMetadata | None) -> TokenUsage:
    if usage is None:
        return TokenUsage()
    thinking = usage.thoughts_token_count or 0
    return TokenUsage(
        prompt_tokens=usage.prompt_token_count or 0,
        output_tokens=(usage.candidates_token_count or 0) + thinking,
        total_tokens=usage.total_token_count or 0,
        cached_tokens=usage.cached_content_token_count or 0,
        thinking_tokens=thinking,
    )


def _enum_text(value: object) -> str | None:
    if value is None:
        return None
    return str(getattr(value, "value", value))


def _shorten(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
