"""The stub's quota mode over HTTP, read by the real google-genai client."""

from __future__ import annotations

import aiohttp
import pytest
from google import genai
from google.genai import errors, types

from agentfleet.gemini_stub import GeminiStub, Reply, Script
from agentfleet.gemini_stub.quota import parse_quota
from agentfleet.llm.genai_translate import retry_hint_s

MODEL = "gemini-2.5-flash"


async def test_past_the_quota_google_genai_gets_resource_exhausted_with_retry_info() -> None:
    stub = GeminiStub(quota=parse_quota("rpm=2/600s"))
    base_url = await stub.start()
    stub.add_script(Script(name="any", replies=[Reply(text="ok")] * 5))
    client = genai.Client(api_key="k", http_options=types.HttpOptions(base_url=base_url))
    try:
        for _ in range(2):
            await client.aio.models.generate_content(model=MODEL, contents="hi")
        with pytest.raises(errors.ClientError) as refused:
            await client.aio.models.generate_content(model=MODEL, contents="hi")
    finally:
        await client.aio.aclose()
        await stub.stop()
    assert refused.value.code == 429
    assert refused.value.status == "RESOURCE_EXHAUSTED"
    hint = retry_hint_s(refused.value)
    assert hint is not None
    assert 1 <= hint <= 600
    # The refused call never reached a script; the ledger counted it.
    assert stub.used("any") == 2
    assert stub.quota is not None
    [window] = stub.quota.windows()
    assert (window.accepted, window.refused) == (2, 1)


async def test_the_quota_is_set_read_and_switched_off_over_http(gemini_stub: GeminiStub) -> None:
    gemini_stub.add_script(Script(name="any", replies=[Reply(text="ok")] * 3))
    url = f"{gemini_stub.base_url}/_stub/quota"
    generate = f"{gemini_stub.base_url}/v1beta/models/{MODEL}:generateContent"
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    async with aiohttp.ClientSession() as http:
        async with http.post(url, json={"quota": "rpm=1/600s,tpm=100000"}) as answer:
            assert answer.status == 200
        statuses = []
        for _ in range(2):
            async with http.post(generate, json=body) as answer:
                statuses.append(answer.status)
        async with http.get(url) as answer:
            counts = await answer.json()
        async with http.post(url, json={"quota": "rpm=many"}) as answer:
            assert answer.status == 400
            assert "rpm=many" in (await answer.json())["error"]["message"]
        async with http.post(url, json={"quota": None}) as answer:
            assert (await answer.json()) == {"quota": None}
        async with http.post(generate, json=body) as answer:
            statuses.append(answer.status)
    assert statuses == [200, 429, 200]
    requests = [w for w in counts["windows"] if w["limit"] == "requests_per_minute"]
    assert [(w["accepted"], w["refused"]) for w in requests] == [(1, 1)]
    [tokens] = [w for w in counts["windows"] if w["limit"] == "tokens_per_minute"]
    assert tokens["tokens"] > 0
