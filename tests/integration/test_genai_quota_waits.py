"""A 429 is a wait for the model's quota: the real google-genai client against the stub
answering 429 with Gemini's RetryInfo and QuotaFailure details, and the waits the model
client tells its ``on_wait``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
from google.genai import types

from agentfleet.gemini_stub import GeminiStub, Reply, Script
from agentfleet.llm import GenaiModelClient, QuotaWait, RetryPolicy, TransientModelError
from agentfleet.testing.gemini import model_client_for

MODEL = "gemini-2.5-pro"
HINT_S = 0.2
"""The stub's retryDelay: above the policy's own backoff, under its ceiling."""


@pytest.fixture
async def client(gemini_stub: GeminiStub) -> AsyncIterator[GenaiModelClient]:
    made = model_client_for(
        gemini_stub, retry=RetryPolicy(max_attempts=3, base_delay_s=0.001, max_delay_s=5.0)
    )
    yield made
    await made.aclose()


class Waits:
    """Every wait told, and when."""

    def __init__(self) -> None:
        self.told: list[tuple[float, QuotaWait]] = []
        self.first = asyncio.Event()

    async def __call__(self, wait: QuotaWait) -> None:
        self.told.append((time.monotonic(), wait))
        self.first.set()

    @property
    def waits(self) -> list[QuotaWait]:
        return [wait for _, wait in self.told]


async def generate(client: GenaiModelClient, waits: Waits, *, stream: bool = False):  # type: ignore[no-untyped-def]
    request = {
        "model": MODEL,
        "system_instruction": "quota",
        "contents": [types.Content(role="user", parts=[types.Part(text="go")])],
        "on_wait": waits,
    }
    if stream:

        async def ignore(_piece: object) -> None:
            return None

        return await client.generate_stream(on_delta=ignore, **request)  # type: ignore[arg-type]
    return await client.generate(**request)  # type: ignore[arg-type]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
async def test_a_429_with_retry_info_is_a_reported_wait_of_the_hinted_length(
    gemini_stub: GeminiStub, client: GenaiModelClient, stream: bool
) -> None:
    gemini_stub.add_script(
        Script(
            name="q",
            replies=[
                Reply(
                    error_status=429,
                    retry_delay_s=HINT_S,
                    quota_id="GenerateRequestsPerMinutePerProjectPerModel-FreeTier",
                ),
                Reply(text="after the wait"),
            ],
        )
    )
    waits = Waits()
    reply = await generate(client, waits, stream=stream)
    assert (reply.text, reply.attempts) == ("after the wait", 2)
    assert waits.waits == [
        QuotaWait(MODEL, "requests_per_minute", HINT_S, True),
        QuotaWait(MODEL, "requests_per_minute", HINT_S, False),
    ]
    (started, _), (ended, _) = waits.told
    assert ended - started >= HINT_S
    # The retry came after the wait: the stub saw it no earlier than the hint.
    first, second = gemini_stub.requests
    assert second.received_at - first.received_at >= HINT_S


@pytest.mark.parametrize(
    ("quota_id", "limit"),
    [
        ("GenerateContentInputTokensPerModelPerMinute-FreeTier", "tokens_per_minute"),
        ("GenerateRequestsPerDayPerProjectPerModel", "requests_per_day"),
        ("\x1b[2J[red]evil[/red]" + "x" * 10_000, "rate_limit"),
        (None, "rate_limit"),
    ],
    ids=["tokens", "day", "hostile", "none"],
)
async def test_the_limit_is_a_name_of_a_fixed_set_never_the_servers_words(
    gemini_stub: GeminiStub, client: GenaiModelClient, quota_id: str | None, limit: str
) -> None:
    gemini_stub.add_script(
        Script(
            name="q",
            replies=[Reply(error_status=429, quota_id=quota_id), Reply(text="ok")],
        )
    )
    waits = Waits()
    await generate(client, waits)
    assert [(w.limit, w.waiting) for w in waits.waits] == [(limit, True), (limit, False)]


async def test_a_huge_retry_delay_waits_no_longer_than_the_policy_allows(
    gemini_stub: GeminiStub,
) -> None:
    gemini_stub.add_script(
        Script(name="q", replies=[Reply(error_status=429, retry_delay_s=86_400), Reply(text="ok")])
    )
    client = model_client_for(gemini_stub, retry=RetryPolicy.for_tests())
    waits = Waits()
    try:
        await generate(client, waits)
    finally:
        await client.aclose()
    assert [w.expected_wait_s for w in waits.waits] == [0.01, 0.01]


async def test_other_failures_and_the_last_429_report_no_wait(
    gemini_stub: GeminiStub, client: GenaiModelClient
) -> None:
    gemini_stub.add_script(Script(name="q", replies=[Reply(error_status=503), Reply(text="ok")]))
    waits = Waits()
    await generate(client, waits)
    assert waits.waits == []

    gemini_stub.reset()
    gemini_stub.add_script(Script(name="q", replies=[Reply(error_status=429)] * 3))
    with pytest.raises(TransientModelError) as caught:
        await generate(client, waits)
    assert caught.value.status_code == 429
    # Three attempts, two waits between them, each told twice.
    assert [w.waiting for w in waits.waits] == [True, False, True, False]


async def test_a_cancelled_wait_is_told_ended(gemini_stub: GeminiStub) -> None:
    gemini_stub.add_script(
        Script(name="q", replies=[Reply(error_status=429, retry_delay_s=30), Reply(text="ok")])
    )
    client = model_client_for(
        gemini_stub, retry=RetryPolicy(max_attempts=2, base_delay_s=0.001, max_delay_s=60)
    )
    waits = Waits()
    try:
        call = asyncio.ensure_future(generate(client, waits))
        async with asyncio.timeout(10):
            await waits.first.wait()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
    finally:
        await client.aclose()
    assert [(w.expected_wait_s, w.waiting) for w in waits.waits] == [(30, True), (30, False)]
