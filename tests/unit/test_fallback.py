"""Which failures send a model call to the next model (services.executor.model.fallback), as pure
values: the 503 path runs end to end in tests/e2e/test_costs_budgets.py."""

from __future__ import annotations

import pytest
from google.genai import types

from agentfleet.llm import ModelReply, TokenUsage
from agentfleet.llm.errors import (
    MalformedModelReply,
    ModelError,
    ModelRequestError,
    QuotaWaitExceeded,
    QuotaWaitTooLong,
    TransientModelError,
)
from services.executor.model.fallback import falls_back_on, with_fallbacks


def reply() -> ModelReply:
    return ModelReply(
        content=types.Content(role="model", parts=[types.Part(text="ok")]),
        text="ok",
        function_calls=(),
        finish_reason="STOP",
        usage=TokenUsage(),
        model_version=None,
        response_id=None,
        attempts=1,
    )


@pytest.mark.parametrize(
    ("error", "switches"),
    [
        (TransientModelError("overloaded", status_code=503), True),
        (TransientModelError("bad gateway", status_code=502), True),
        (TransientModelError("connection dropped", status_code=None), True),
        (QuotaWaitTooLong("about 40 s", expected_wait_s=40.0), True),
        (QuotaWaitExceeded("gemini-2.5-pro requests_per_day spent"), True),
        (TransientModelError("quota", status_code=429), False),
        (ModelRequestError("bad schema", status_code=400), False),
        (MalformedModelReply("not JSON", status_code=200), False),
    ],
)
def test_only_an_unavailable_model_or_a_long_quota_wait_switches(
    error: ModelError, switches: bool
) -> None:
    assert falls_back_on(error) is switches


async def test_the_first_model_that_answers_is_named_with_why_the_others_did_not() -> None:
    asked: list[str] = []

    async def call(model: str) -> ModelReply:
        asked.append(model)
        if model == "pro":
            raise QuotaWaitTooLong("expected wait 45 s", expected_wait_s=45.0)
        if model == "flash":
            raise TransientModelError("overloaded", status_code=503)
        return reply()

    answered = await with_fallbacks(call, ["pro", "flash", "lite"])
    assert asked == ["pro", "flash", "lite"]
    assert answered.model == "lite"
    assert answered.fallback_reason == "pro: 429 expected wait 45 s; flash: 503 overloaded"


async def test_a_request_error_or_the_last_models_failure_is_raised() -> None:
    async def bad_request(model: str) -> ModelReply:
        raise ModelRequestError("bad schema", status_code=400)

    with pytest.raises(ModelRequestError):
        await with_fallbacks(bad_request, ["pro", "flash"])

    async def down(model: str) -> ModelReply:
        raise TransientModelError(f"{model} down", status_code=503)

    with pytest.raises(TransientModelError, match="flash down"):
        await with_fallbacks(down, ["pro", "flash"])
