"""The fast path's streamed call (``streamGenerateContent``, SSE) against the SDK's own
``generate_content_stream``: on the same wire answers both give the same chunks, send the
same body, raise the same error for an error chunk, and follow a continuation token with the
same second hop. The self-check refuses a fast stream whose URL differs.

``BaseApiClient._async_request_once`` (the one HTTP call) is replaced here, in the tests
only, by a recorder that answers canned chunks, so the SDK's whole path above it runs.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from google import genai
from google.genai import errors
from google.genai._api_client import HttpResponse

from agentfleet.config import load_settings
from agentfleet.llm import build_genai_client, genai_fast
from agentfleet.llm.genai_fast import FastGenerate
from agentfleet.llm.genai_selfcheck import (
    SAMPLE_CHUNKS,
    check_fast_path,
    sample_contents,
    sample_tools,
)

ERROR_CHUNK = {"error": {"code": 400, "message": "bad turn", "status": "INVALID_ARGUMENT"}}
PAUSED = {
    "candidates": [
        {
            "content": {"role": "model", "parts": [{"text": "first half, "}]},
            "finishReason": "CONTINUATION",
            "continuationToken": "dG9rZW4=",
            "index": 0,
        }
    ],
    "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 2, "totalTokenCount": 7},
}
RESUMED = {
    "candidates": [
        {
            "content": {"role": "model", "parts": [{"text": "second half"}]},
            "finishReason": "STOP",
            "index": 0,
        }
    ],
    "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 3, "totalTokenCount": 8},
}


class Wire:
    """Stands in for the HTTP call: records each request, answers the next list of chunks."""

    def __init__(self, *answers: list[dict[str, Any]]) -> None:
        self.answers = list(answers)
        self.sent: list[tuple[str, Any, bool]] = []

    async def __call__(self, http_request: Any, stream: bool = False, **_: Any) -> HttpResponse:
        data = http_request.data
        body = json.loads(data) if isinstance(data, bytes) else data
        self.sent.append((http_request.url, body, stream))
        chunks = [json.dumps(chunk) for chunk in self.answers.pop(0)]
        return HttpResponse(headers={"x-wire": "1"}, response_stream=chunks)


def _client(wire: Wire) -> genai.Client:
    settings = load_settings({}).with_overrides(
        gemini_base_url="http://127.0.0.1:9", gemini_api_key=None, gemini_use_vertex=False
    )
    client = build_genai_client(settings)
    client.aio.models._api_client._async_request_once = wire  # type: ignore[method-assign]
    return client


async def _both(*answers: list[dict[str, Any]]) -> tuple[list[Any], list[Any], Wire, Wire]:
    """The chunks (or the error) of one streamed call by each path, and their wires."""
    results: list[list[Any]] = []
    wires = []
    for fast_path in (True, False):
        wire = Wire(*answers)
        client = _client(wire)
        fast = FastGenerate(client)
        head = fast.head_for(
            model="m", system_instruction="be brief", tools=sample_tools(), config=None
        )
        got: list[Any] = []
        try:
            if fast_path:
                stream = fast.stream(head, sample_contents())
            else:
                stream = await client.aio.models.generate_content_stream(
                    model="m", contents=sample_contents(), config=head.config
                )
            async for chunk in stream:
                got.append(chunk.model_dump())
        except errors.APIError as exc:
            got.append((type(exc), exc.code, exc.message))
        results.append(got)
        wires.append(wire)
    return results[0], results[1], wires[0], wires[1]


async def test_the_same_chunks_and_request_as_the_sdk() -> None:
    fast, sdk, fast_wire, sdk_wire = await _both(SAMPLE_CHUNKS)
    assert fast == sdk
    assert len(fast) == len(SAMPLE_CHUNKS)
    assert fast[-1]["sdk_http_response"]["headers"] == {"x-wire": "1"}
    assert fast_wire.sent == sdk_wire.sent
    ((url, _, streamed),) = fast_wire.sent
    assert url.endswith("models/m:streamGenerateContent?alt=sse")
    assert streamed


async def test_an_error_chunk_raises_the_same_error() -> None:
    fast, sdk, _, _ = await _both([SAMPLE_CHUNKS[0], ERROR_CHUNK])
    assert fast == sdk
    assert fast[-1] == (errors.ClientError, 400, "bad turn")


async def test_a_continuation_token_is_followed_as_the_sdk_follows_it() -> None:
    fast, sdk, fast_wire, sdk_wire = await _both([PAUSED], [RESUMED])
    assert fast == sdk
    texts = [c["candidates"][0]["content"]["parts"][0]["text"] for c in fast]
    assert texts == ["first half, ", "second half"]
    assert fast[0]["candidates"][0]["finish_reason"] is None  # cleared: the stream went on
    assert fast_wire.sent == sdk_wire.sent
    assert fast_wire.sent[1][1]["continuationToken"] == "dG9rZW4="


def test_the_self_check_refuses_a_fast_stream_whose_url_differs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    right = genai_fast._path

    def wrong(method: str, url: Any, query: Any) -> str:
        return right(method.replace("?alt=sse", ""), url, query)

    monkeypatch.setattr(genai_fast, "_path", wrong)
    reason = check_fast_path(vertex=False)
    assert reason is not None
    assert "stream URL" in reason


def test_the_self_check_refuses_a_fast_stream_parsed_differently(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parse = FastGenerate.response

    def text_pieces_lose_their_thought_flag(
        self: FastGenerate, head: Any, answer: Any, headers: Any
    ) -> Any:
        for candidate in answer.get("candidates", []):
            parts = candidate["content"]["parts"]
            if not any("functionCall" in part for part in parts):  # not the unary sample
                for part in parts:
                    part.pop("thought", None)
        return parse(self, head, answer, headers)

    monkeypatch.setattr(FastGenerate, "response", text_pieces_lose_their_thought_flag)
    reason = check_fast_path(vertex=False)
    assert reason is not None
    assert "parses the sample stream" in reason
