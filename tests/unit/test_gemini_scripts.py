"""Script matching, reply sequencing, policies and the wire format of the stub — no I/O."""

from __future__ import annotations

import pytest

from agentfleet.gemini_stub import (
    Call,
    Reply,
    Script,
    ScriptBook,
    ScriptExhausted,
    ScriptFormatError,
    StubRequest,
    Usage,
    reply_from_json,
    script_to_json,
    scripts_from_json,
    wire,
)


def request(
    *,
    system: str | None = "You are the researcher.",
    model: str = "gemini-2.5-flash",
    contents: list[dict] | None = None,
    tools: list[str] = (),
) -> StubRequest:
    body: dict = {"contents": contents or [{"role": "user", "parts": [{"text": "go"}]}]}
    if system is not None:
        body["systemInstruction"] = {"role": "user", "parts": [{"text": system}]}
    if tools:
        body["tools"] = [{"functionDeclarations": [{"name": name} for name in tools]}]
    return StubRequest(
        model=model,
        method="generateContent",
        api_version="v1beta",
        path=f"/v1beta/models/{model}:generateContent",
        body=body,
        received_at=0.0,
    )


def conversation(turns: int, *, responses: int = 0, last_user: str = "go") -> list[dict]:
    """A conversation with ``turns`` model turns, ``responses`` function responses."""
    contents: list[dict] = [{"role": "user", "parts": [{"text": "start"}]}]
    for i in range(turns):
        contents.append({"role": "model", "parts": [{"functionCall": {"name": "f", "args": {}}}]})
        if i < responses:
            contents.append(
                {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {}}}]}
            )
    contents.append({"role": "user", "parts": [{"text": last_user}]})
    return contents


# --- Reply and Script validation -------------------------------------------------------------


def test_reply_kinds_are_exclusive() -> None:
    with pytest.raises(ValueError, match="one of"):
        Reply(text="x", error_status=429)
    with pytest.raises(ValueError, match="one of"):
        Reply(malformed=True, empty=True)
    with pytest.raises(ValueError, match="needs"):
        Reply()
    with pytest.raises(ValueError, match="4xx or 5xx"):
        Reply(error_status=200)
    assert Reply(hang=True).hang
    assert Reply(text="late", delay_s=0.5).delay_s == 0.5


def test_reply_content_puts_text_before_calls() -> None:
    reply = Reply(text="thinking", calls=[Call("a", {"x": 1}), Call("b", id="c2")])
    content = reply.content()
    assert content.role == "model"
    assert [p.text for p in content.parts] == ["thinking", None, None]
    assert [p.function_call.name for p in content.parts[1:]] == ["a", "b"]
    assert content.parts[2].function_call.id == "c2"


def test_script_needs_replies_or_policy_not_both() -> None:
    with pytest.raises(ValueError, match="replies or a policy"):
        Script(name="s")
    with pytest.raises(ValueError, match="not both"):
        Script(name="s", replies=[Reply(text="x")], policy=lambda r: Reply(text="y"))


# --- matching --------------------------------------------------------------------------------


def test_match_by_system_substring_and_by_model() -> None:
    book = ScriptBook()
    book.add(Script(name="by-system", match_system="researcher", replies=[Reply(text="r")]))
    book.add(Script(name="by-model", match_model="models/gemini-pro", replies=[Reply(text="m")]))
    assert book.find(request(system="You are the researcher.")).name == "by-system"
    assert book.find(request(system="You are a critic.", model="gemini-pro")).name == "by-model"
    assert book.find(request(system="You are a critic.")) is None


def test_both_matchers_must_match() -> None:
    book = ScriptBook()
    book.add(
        Script(name="s", match_system="critic", match_model="gemini-pro", replies=[Reply(text="x")])
    )
    assert book.find(request(system="critic", model="gemini-flash")) is None
    assert book.find(request(system="critic", model="gemini-pro")).name == "s"


def test_first_match_wins_and_default_comes_last() -> None:
    book = ScriptBook()
    book.add(Script(name="fallback", replies=[Reply(text="d")]))
    book.add(Script(name="first", match_system="You are", replies=[Reply(text="1")]))
    book.add(Script(name="second", match_system="researcher", replies=[Reply(text="2")]))
    assert book.find(request(system="You are the researcher.")).name == "first"
    assert book.find(request(system=None)).name == "fallback"
    assert [s.name for s in book.scripts()] == ["first", "second", "fallback"]


def test_duplicate_names_and_two_defaults_are_refused() -> None:
    book = ScriptBook()
    book.add(Script(name="a", replies=[Reply(text="x")]))
    with pytest.raises(ValueError, match="already the default"):
        book.add(Script(name="b", replies=[Reply(text="x")]))
    with pytest.raises(ValueError, match="already exists"):
        book.add(Script(name="a", match_system="x", replies=[Reply(text="x")]))


# --- sequencing ------------------------------------------------------------------------------


async def test_replies_are_consumed_in_order_then_fail_loudly() -> None:
    book = ScriptBook()
    book.add(Script(name="worker", replies=[Reply(calls=[Call("f")]), Reply(error_status=429)]))
    first = request()
    _, reply = await book.next_reply(first)
    assert reply.calls[0].name == "f"
    assert first.script == "worker"
    _, reply = await book.next_reply(request())
    assert reply.error_status == 429
    assert book.remaining("worker") == 0
    with pytest.raises(ScriptExhausted, match=r"script 'worker' ran out of replies at request 3"):
        await book.next_reply(request())
    assert book.used("worker") == 3


async def test_no_matching_script_names_the_request() -> None:
    book = ScriptBook()
    book.add(Script(name="x", match_system="nobody", replies=[Reply(text="x")]))
    with pytest.raises(ScriptExhausted, match=r"no script matches model 'gemini-2\.5-flash'"):
        await book.next_reply(request())


async def test_per_conversation_scripts_follow_each_conversation() -> None:
    book = ScriptBook()
    replies = [Reply(calls=[Call("search")]), Reply(calls=[Call("fetch")]), Reply(text="done")]
    book.add(Script(name="agent", per_conversation=True, replies=replies))
    # Two conversations interleaved: each gets the reply of its own turn.
    for turns, expected in [(0, "search"), (0, "search"), (1, "fetch"), (1, "fetch")]:
        _, reply = await book.next_reply(request(contents=conversation(turns)))
        assert reply.calls[0].name == expected
    _, reply = await book.next_reply(request(contents=conversation(2)))
    assert reply.text == "done"
    with pytest.raises(ScriptExhausted, match="'agent' ran out of replies at turn 3"):
        await book.next_reply(request(contents=conversation(3)))


# --- policies --------------------------------------------------------------------------------


async def test_sync_policy_reads_the_conversation() -> None:
    def researcher(req: StubRequest) -> Reply:
        if len(req.function_responses()) < 2:
            return Reply(calls=[Call("web_search", {"query": req.last_user_text()})])
        return Reply(text=f"report after {len(req.function_responses())} results")

    book = ScriptBook()
    book.add(Script(name="researcher", policy=researcher))
    _, reply = await book.next_reply(request(contents=conversation(1, responses=1, last_user="q")))
    assert reply.calls[0].args == {"query": "q"}
    _, reply = await book.next_reply(request(contents=conversation(2, responses=2)))
    assert reply.text == "report after 2 results"


async def test_async_policy_and_a_policy_returning_garbage() -> None:
    async def echo(req: StubRequest) -> Reply:
        return Reply(text=f"{req.model}: {','.join(req.tool_names)}")

    book = ScriptBook()
    book.add(Script(name="echo", match_system="echo", policy=echo))
    book.add(Script(name="broken", match_system="broken", policy=lambda r: "text"))  # type: ignore[arg-type,return-value]
    _, reply = await book.next_reply(request(system="echo", tools=["a", "b"]))
    assert reply.text == "gemini-2.5-flash: a,b"
    with pytest.raises(ScriptExhausted, match="policy of script 'broken' returned 'text'"):
        await book.next_reply(request(system="broken"))


def test_stub_request_readers() -> None:
    req = request(contents=conversation(2, responses=1, last_user="and now?"))
    req.body["contents"][0]["parts"].insert(0, {"text": "hidden", "thought": True})
    assert req.turn == 2
    assert req.system_instruction == "You are the researcher."
    assert req.last_user_text() == "and now?"
    assert len(req.function_responses()) == 1
    assert [c.role for c in req.typed_contents()] == ["user", "model", "user", "model", "user"]
    assert request(system=None).system_instruction == ""


# --- JSON scripts ----------------------------------------------------------------------------


def test_scripts_round_trip_through_json() -> None:
    script = Script(
        name="agent",
        match_system="You are",
        per_conversation=True,
        replies=[
            Reply(text="a", calls=[Call("f", {"x": [1, 2]}, id="c1")], finish_reason="STOP"),
            Reply(error_status=503, error_message="overloaded", delay_s=0.1),
            Reply(text="b", usage=Usage(prompt_tokens=3, candidates_tokens=4)),
            Reply(empty=True, block_reason="SAFETY"),
            Reply(malformed=True),
            Reply(hang=True),
        ],
    )
    [back] = scripts_from_json({"scripts": [script_to_json(script)]})
    assert back == script


def test_bad_json_scripts_name_the_path() -> None:
    with pytest.raises(ScriptFormatError, match=r"scripts\[0\]\.replies\[1\]: unknown field"):
        scripts_from_json([{"name": "a", "replies": [{"text": "x"}, {"txt": "y"}]}])
    with pytest.raises(ScriptFormatError, match=r"replies\[0\]: .*4xx or 5xx"):
        scripts_from_json({"name": "a", "replies": [{"error_status": 200}]})
    with pytest.raises(ScriptFormatError, match="replies: must be a list"):
        scripts_from_json({"name": "a"})
    with pytest.raises(ScriptFormatError, match="reply: must be an object"):
        reply_from_json("text")


def test_policy_scripts_do_not_travel_as_json() -> None:
    with pytest.raises(ScriptFormatError, match="policy"):
        script_to_json(Script(name="p", policy=lambda r: Reply(text="x")))


# --- wire format -----------------------------------------------------------------------------


def test_generate_response_shape_and_computed_usage() -> None:
    req = request()
    body = wire.generate_response(Reply(text="x" * 40, calls=[Call("f", {"a": 1})]), req, "r1")
    [candidate] = body["candidates"]
    assert candidate["content"] == {
        "role": "model",
        "parts": [{"text": "x" * 40}, {"functionCall": {"name": "f", "args": {"a": 1}}}],
    }
    assert candidate["finishReason"] == "STOP"
    usage = body["usageMetadata"]
    assert usage["promptTokenCount"] > 0
    assert usage["candidatesTokenCount"] >= 10
    assert usage["totalTokenCount"] == usage["promptTokenCount"] + usage["candidatesTokenCount"]
    assert body["responseId"] == "r1"
    assert body["modelVersion"] == "gemini-2.5-flash"


def test_explicit_usage_wins() -> None:
    usage = Usage(prompt_tokens=100, candidates_tokens=7, total_tokens=120)
    body = wire.generate_response(Reply(text="x", usage=usage), request(), "r")
    assert body["usageMetadata"] == {
        "promptTokenCount": 100,
        "candidatesTokenCount": 7,
        "totalTokenCount": 120,
    }


def test_stream_chunks_split_text_and_end_with_calls_and_usage() -> None:
    reply = Reply(text="abcdefgh", calls=[Call("f")], stream_chunk_chars=3)
    chunks = wire.stream_responses(reply, request(), "r")
    texts = [c["candidates"][0]["content"]["parts"][0].get("text") for c in chunks]
    assert texts == ["abc", "def", "gh"]
    assert "usageMetadata" not in chunks[0]
    assert chunks[-1]["candidates"][0]["content"]["parts"][1] == {
        "functionCall": {"name": "f", "args": {}}
    }
    assert chunks[-1]["candidates"][0]["finishReason"] == "STOP"
    assert "usageMetadata" in chunks[-1]


def test_empty_reply_and_error_bodies() -> None:
    body = wire.generate_response(Reply(empty=True, block_reason="SAFETY"), request(), "r")
    assert "candidates" not in body
    assert body["promptFeedback"] == {"blockReason": "SAFETY"}
    assert wire.reply_error_body(Reply(error_status=429, error_message="slow")) == {
        "error": {"code": 429, "message": "slow", "status": "RESOURCE_EXHAUSTED"}
    }
    assert wire.error_body(503, "m")["error"]["status"] == "UNAVAILABLE"
