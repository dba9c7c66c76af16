"""The fast path's switch and fallback against the real stub server (issue #17): with the
self-check passing and the switch on, calls take the fast path; with a google-genai name
gone (removed here, in the test only) or the switch off, every call takes the SDK's public
path, one warning says why, and calls still succeed, sending the stub the same request.
A streamed call hands on the same pieces and returns the same reply on either path."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from google.genai import models, types

from agentfleet.gemini_stub import Call, GeminiStub, Reply, Script
from agentfleet.llm import GenaiModelClient, ModelReply, RetryPolicy, TextDelta
from agentfleet.llm import genai_client as genai_client_module
from agentfleet.testing.gemini import stub_settings


def echo_answered() -> types.Content:
    """What the conversation gets after each echo call (a new object each time, as a loop
    makes it)."""
    return types.Content(
        role="user",
        parts=[
            types.Part(function_response=types.FunctionResponse(name="echo", response={"ok": 1}))
        ],
    )


TOOLS = [
    types.Tool(
        function_declarations=[
            types.FunctionDeclaration(
                name="echo", parameters_json_schema={"type": "object", "properties": {}}
            )
        ]
    )
]


class Warnings:
    """Records the model client module's warnings (its logger, replaced in the test)."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, dict[str, Any]]] = []

    def warning(self, event: str, **fields: Any) -> None:
        self.lines.append((event, fields))


@pytest.fixture
def warnings(monkeypatch: pytest.MonkeyPatch) -> Warnings:
    recorder = Warnings()
    monkeypatch.setattr(genai_client_module, "_log", recorder)
    # A fresh process as far as "said once" goes.
    monkeypatch.setattr(genai_client_module, "_WARNED", set())
    return recorder


def _client(stub: GeminiStub, *, fast_path: bool = True) -> GenaiModelClient:
    settings = stub_settings(stub).with_overrides(genai_fast_path=fast_path)
    return GenaiModelClient.from_settings(settings, retry=RetryPolicy.for_tests())


async def _two_steps(client: GenaiModelClient) -> list[str]:
    """Two calls of one run (a tool call, then the final answer); the replies' texts."""
    contents = [types.Content(role="user", parts=[types.Part(text="go")])]
    texts = []
    for _ in range(2):
        reply = await client.generate(
            model="m", system_instruction="be brief", contents=contents, tools=TOOLS
        )
        texts.append(reply.text)
        contents.append(reply.content)
        contents.append(echo_answered())
    return texts


def _script(stub: GeminiStub) -> None:
    stub.add_script(
        Script(
            name="s",
            per_conversation=True,
            replies=[Reply(calls=[Call("echo", {"x": 1})]), Reply(text="done")],
        )
    )


async def test_the_fast_path_serves_calls_when_the_check_passes(
    gemini_stub: GeminiStub, warnings: Warnings
) -> None:
    _script(gemini_stub)
    client = _client(gemini_stub)
    try:
        assert await _two_steps(client) == ["", "done"]
    finally:
        await client.aclose()
    assert client.fast_path_off_reason is None
    assert client.calls_by_path == {"fast": 2}
    assert warnings.lines == []


async def test_a_missing_google_genai_name_falls_back_logged_once(
    gemini_stub: GeminiStub, warnings: Warnings, monkeypatch: pytest.MonkeyPatch
) -> None:
    _script(gemini_stub)
    # What an upgrade that renamed it would look like (the Gemini API path does not use it).
    monkeypatch.delattr(models, "_GenerateContentResponse_from_vertex")
    clients = [_client(gemini_stub), _client(gemini_stub)]
    try:
        for client in clients:
            assert await _two_steps(client) == ["", "done"]
    finally:
        for client in clients:
            await client.aclose()
    for client in clients:
        assert client.calls_by_path == {"sdk": 2}
        assert "_GenerateContentResponse_from_vertex" in (client.fast_path_off_reason or "")
    assert len(warnings.lines) == 1
    event, fields = warnings.lines[0]
    assert "fast path off" in event
    assert "_GenerateContentResponse_from_vertex" in fields["why"]


async def test_switched_off_every_call_takes_the_sdk_path_and_sends_the_same(
    gemini_stub: GeminiStub, warnings: Warnings
) -> None:
    _script(gemini_stub)
    fast, sdk = _client(gemini_stub), _client(gemini_stub, fast_path=False)
    try:
        assert await _two_steps(fast) == ["", "done"]
        assert await _two_steps(sdk) == ["", "done"]
    finally:
        await fast.aclose()
        await sdk.aclose()
    assert sdk.calls_by_path == {"sdk": 2}
    assert sdk.fast_path_off_reason == "switched off (AGENTFLEET_GENAI_FAST_PATH=off)"
    assert [fields["why"] for _, fields in warnings.lines] == [sdk.fast_path_off_reason]
    fast_requests, sdk_requests = gemini_stub.requests[:2], gemini_stub.requests[2:]
    assert [r.body for r in sdk_requests] == [r.body for r in fast_requests]
    assert [r.path for r in sdk_requests] == [r.path for r in fast_requests]


async def test_aclose_closes_the_sessions_it_made(gemini_stub: GeminiStub) -> None:
    _script(gemini_stub)
    client = _client(gemini_stub)
    await _two_steps(client)
    (channel,) = client._channels.values()
    assert channel.session is not None
    assert not channel.session.closed
    await client.aclose()
    assert channel.session.closed


async def _streamed_steps(client: GenaiModelClient) -> tuple[list[TextDelta], list[ModelReply]]:
    """Two streamed calls of one run: every piece handed on, and the replies."""
    contents = [types.Content(role="user", parts=[types.Part(text="go")])]
    pieces: list[TextDelta] = []
    replies = []

    async def keep(piece: TextDelta) -> None:
        pieces.append(piece)

    for _ in range(2):
        reply = await client.generate_stream(
            model="m", system_instruction="be brief", contents=contents, tools=TOOLS, on_delta=keep
        )
        replies.append(reply)
        contents.append(reply.content)
        contents.append(echo_answered())
    return pieces, replies


async def test_a_streamed_call_gives_the_same_pieces_and_reply_on_both_paths(
    gemini_stub: GeminiStub, warnings: Warnings
) -> None:
    gemini_stub.add_script(
        Script(
            name="s",
            per_conversation=True,
            replies=[
                Reply(
                    thought="Let me look.",
                    text="Looking it up \u2603 now.",
                    calls=[Call("echo", {"x": 1})],
                    stream_chunk_chars=4,
                ),
                Reply(text="All done: the answer is 42.", stream_chunk_chars=5),
            ],
        )
    )
    fast, sdk = _client(gemini_stub), _client(gemini_stub, fast_path=False)
    try:
        fast_pieces, fast_replies = await _streamed_steps(fast)
        sdk_pieces, sdk_replies = await _streamed_steps(sdk)
    finally:
        await fast.aclose()
        await sdk.aclose()
    assert fast.calls_by_path == {"fast_stream": 2}
    assert sdk.calls_by_path == {"sdk_stream": 2}
    assert fast_pieces == sdk_pieces
    assert len(fast_pieces) > 8
    # Content (parts merged), text, calls, usage: all but the stub's id of each answer.
    assert [replace(r, response_id=None) for r in fast_replies] == [
        replace(r, response_id=None) for r in sdk_replies
    ]
    assert fast_replies[1].text == "All done: the answer is 42."
    fast_requests, sdk_requests = gemini_stub.requests[:2], gemini_stub.requests[2:]
    assert all(r.method == "streamGenerateContent" for r in gemini_stub.requests)
    assert [r.body for r in sdk_requests] == [r.body for r in fast_requests]
    assert [r.path for r in sdk_requests] == [r.path for r in fast_requests]
