"""The stub streams ``:streamGenerateContent?alt=sse`` in chunks, as the real API does, and
the real google-genai client (through :meth:`GenaiModelClient.generate_stream`) folds the
chunks into the reply a plain call gives, handing each text and thought piece on with its
offset as it arrives."""

from __future__ import annotations

import asyncio
import time

import pytest
from google.genai import types

from agentfleet.gemini_stub import Call, GeminiStub, Reply, Script
from agentfleet.gemini_stub.request import StubRequest
from agentfleet.gemini_stub.wire import stream_responses
from agentfleet.llm import GenaiModelClient, ModelRequestError, TextDelta

TEXT = "Streaming answers arrive in pieces, then the calls."
THOUGHT = "Think first."
USER = [types.Content(role="user", parts=[types.Part(text="go")])]


def _request() -> StubRequest:
    return StubRequest(
        model="m",
        method="streamGenerateContent",
        api_version="v1beta",
        path="/",
        body={},
        received_at=0.0,
    )


def test_chunks_carry_thought_then_text_pieces_and_the_calls_last() -> None:
    reply = Reply(
        text=TEXT, thought=THOUGHT, calls=[Call("lookup", {"q": 1})], stream_chunk_chars=5
    )
    chunks = stream_responses(reply, _request(), "r-1")
    parts = [p for c in chunks for p in c["candidates"][0]["content"]["parts"]]
    thought = "".join(p["text"] for p in parts if p.get("thought"))
    text = "".join(p["text"] for p in parts if "text" in p and not p.get("thought"))
    assert (thought, text) == (THOUGHT, TEXT)
    assert len(chunks) == len(THOUGHT) // 5 + 1 + len(TEXT) // 5 + 1
    assert "functionCall" in chunks[-1]["candidates"][0]["content"]["parts"][-1]
    assert all("finishReason" not in c["candidates"][0] for c in chunks[:-1])
    assert chunks[-1]["candidates"][0]["finishReason"] == "STOP"
    assert "usageMetadata" in chunks[-1]


def test_a_thought_alone_is_not_a_reply() -> None:
    with pytest.raises(ValueError, match="needs text, calls"):
        Reply(thought="only thinking")


async def test_generate_stream_folds_chunks_into_the_plain_reply(
    gemini_stub: GeminiStub, gemini_model_client: GenaiModelClient
) -> None:
    reply = Reply(
        text=TEXT, thought=THOUGHT, calls=[Call("lookup", {"q": 1})], stream_chunk_chars=4
    )
    gemini_stub.add_script(Script(name="s", replies=[reply, reply]))
    pieces: list[TextDelta] = []

    async def sink(delta: TextDelta) -> None:
        pieces.append(delta)

    streamed = await gemini_model_client.generate_stream(
        model="gemini-2.5-flash", system_instruction=None, contents=USER, on_delta=sink
    )
    plain = await gemini_model_client.generate(
        model="gemini-2.5-flash", system_instruction=None, contents=USER
    )

    first, second = gemini_stub.requests
    assert first.method == "streamGenerateContent"
    assert "alt=sse" in first.path
    assert second.method == "generateContent"
    assert streamed.content == plain.content  # one thought part, one text part, the call
    assert streamed.text == TEXT
    assert [c.name for c in streamed.function_calls] == ["lookup"]
    assert streamed.finish_reason == "STOP"
    assert streamed.usage == plain.usage
    for thought in (True, False):
        mine = [p for p in pieces if p.thought is thought]
        expected = THOUGHT if thought else TEXT
        assert "".join(p.text for p in mine) == expected
        assert [p.offset for p in mine] == list(range(0, len(expected), 4))


async def test_pieces_are_handed_on_as_they_arrive(
    gemini_stub: GeminiStub, gemini_model_client: GenaiModelClient
) -> None:
    gemini_stub.add_script(
        Script(
            name="s", replies=[Reply(text="abcdef", stream_chunk_chars=2, stream_chunk_delay_s=0.2)]
        )
    )
    seen: list[float] = []

    async def sink(delta: TextDelta) -> None:
        seen.append(time.monotonic())

    started = time.monotonic()
    await gemini_model_client.generate_stream(
        model="gemini-2.5-flash", system_instruction=None, contents=USER, on_delta=sink
    )
    ended = time.monotonic()
    assert len(seen) == 3
    # The first piece came before the stream ended: it was not buffered to the end.
    assert seen[0] - started < ended - started - 0.3


async def test_an_error_before_any_piece_is_retried_and_a_4xx_is_not(
    gemini_stub: GeminiStub, gemini_model_client: GenaiModelClient
) -> None:
    gemini_stub.add_script(
        Script(
            name="s",
            replies=[
                Reply(error_status=503),
                Reply(text="ok", stream_chunk_chars=1),
                Reply(error_status=400, error_message="bad request"),
            ],
        )
    )

    async def sink(delta: TextDelta) -> None:
        pass

    reply = await gemini_model_client.generate_stream(
        model="gemini-2.5-flash", system_instruction=None, contents=USER, on_delta=sink
    )
    assert (reply.text, reply.attempts) == ("ok", 2)
    with pytest.raises(ModelRequestError, match="bad request"):
        await asyncio.wait_for(
            gemini_model_client.generate_stream(
                model="gemini-2.5-flash", system_instruction=None, contents=USER, on_delta=sink
            ),
            10,
        )
