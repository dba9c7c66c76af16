"""The real google-genai client against the stub server, and GenaiModelClient's policy."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from google import genai
from google.genai import errors, types

from agentfleet.gemini_stub import (
    Call,
    GeminiStub,
    Reply,
    Script,
    StubRequest,
    Usage,
    script_to_json,
)
from agentfleet.llm import (
    GenaiModelClient,
    MalformedModelReply,
    ModelRequestError,
    RetryPolicy,
    TransientModelError,
    content_from_json,
    content_to_json,
)
from agentfleet.testing.gemini import model_client_for

MODEL = "gemini-2.5-flash"

SEARCH_TOOL = types.Tool(
    function_declarations=[
        types.FunctionDeclaration(
            name="web_search",
            description="Search the web.",
            parameters_json_schema={
                "type": "object",
                "properties": {"query": {"type": "string"}},
                "required": ["query"],
            },
        ),
        types.FunctionDeclaration(name="web_fetch", description="Fetch a page."),
    ]
)


@pytest.fixture
async def genai_client(gemini_stub: GeminiStub) -> AsyncIterator[genai.Client]:
    client = genai.Client(
        api_key="any-key", http_options=types.HttpOptions(base_url=gemini_stub.base_url)
    )
    yield client
    await client.aio.aclose()


def user(text: str) -> types.Content:
    return types.Content(role="user", parts=[types.Part(text=text)])


async def generate(
    client: genai.Client, *, stream: bool, system: str = "You are the researcher."
) -> types.GenerateContentResponse:
    """One call, streamed or not; a stream's chunks are folded into one response."""
    config = types.GenerateContentConfig(system_instruction=system, tools=[SEARCH_TOOL])
    if not stream:
        return await client.aio.models.generate_content(
            model=MODEL, contents=[user("hello")], config=config
        )
    chunks = [
        chunk
        async for chunk in await client.aio.models.generate_content_stream(
            model=MODEL, contents=[user("hello")], config=config
        )
    ]
    parts = [p for c in chunks for p in c.candidates[0].content.parts]
    last = chunks[-1]
    last.candidates[0].content = types.Content(role="model", parts=parts)
    return last


# --- the real google-genai client ------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
async def test_scripted_text_reply(
    gemini_stub: GeminiStub, genai_client: genai.Client, stream: bool
) -> None:
    gemini_stub.add_script(
        Script(
            name="researcher",
            match_system="researcher",
            replies=[Reply(text="Gemini is a model family.", stream_chunk_chars=7)],
        )
    )
    response = await generate(genai_client, stream=stream)
    assert response.text == "Gemini is a model family."
    assert response.candidates[0].finish_reason == types.FinishReason.STOP
    [recorded] = gemini_stub.requests_for("researcher")
    assert recorded.method == ("streamGenerateContent" if stream else "generateContent")


@pytest.mark.parametrize("stream", [False, True])
async def test_two_function_calls_in_one_reply(
    gemini_stub: GeminiStub, genai_client: genai.Client, stream: bool
) -> None:
    calls = [Call("web_search", {"query": "gemini"}), Call("web_fetch", {"url": "https://x"})]
    gemini_stub.add_script(Script(name="researcher", replies=[Reply(calls=calls)]))
    response = await generate(genai_client, stream=stream)
    assert [(c.name, c.args) for c in response.function_calls] == [
        ("web_search", {"query": "gemini"}),
        ("web_fetch", {"url": "https://x"}),
    ]


async def test_usage_metadata_is_surfaced(
    gemini_stub: GeminiStub, genai_client: genai.Client
) -> None:
    gemini_stub.add_script(
        Script(
            name="researcher",
            replies=[
                Reply(text="a", usage=Usage(prompt_tokens=120, candidates_tokens=8)),
                Reply(text="b" * 400),
            ],
        )
    )
    explicit = (await generate(genai_client, stream=False)).usage_metadata
    assert (explicit.prompt_token_count, explicit.candidates_token_count) == (120, 8)
    assert explicit.total_token_count == 128
    computed = (await generate(genai_client, stream=True)).usage_metadata
    assert computed.prompt_token_count > 0
    assert computed.candidates_token_count >= 100


@pytest.mark.parametrize("stream", [False, True])
async def test_scripted_429_is_a_client_error(
    gemini_stub: GeminiStub, genai_client: genai.Client, stream: bool
) -> None:
    gemini_stub.add_script(
        Script(name="r", replies=[Reply(error_status=429, error_message="quota exceeded")])
    )
    with pytest.raises(errors.ClientError) as caught:
        await generate(genai_client, stream=stream)
    assert caught.value.code == 429
    assert caught.value.status == "RESOURCE_EXHAUSTED"
    assert caught.value.message == "quota exceeded"


async def test_scripted_500_is_a_server_error(
    gemini_stub: GeminiStub, genai_client: genai.Client
) -> None:
    gemini_stub.add_script(Script(name="r", replies=[Reply(error_status=500)]))
    with pytest.raises(errors.ServerError) as caught:
        await generate(genai_client, stream=False)
    assert caught.value.code == 500


async def test_exhausted_script_answers_500_naming_it(
    gemini_stub: GeminiStub, genai_client: genai.Client
) -> None:
    gemini_stub.add_script(Script(name="one-shot", replies=[Reply(text="only")]))
    await generate(genai_client, stream=False)
    with pytest.raises(errors.ServerError, match="script 'one-shot' ran out of replies"):
        await generate(genai_client, stream=False)


async def test_recorded_request_has_system_instruction_and_tools(
    gemini_stub: GeminiStub, genai_client: genai.Client
) -> None:
    gemini_stub.add_script(Script(name="r", replies=[Reply(text="ok")]))
    await generate(genai_client, stream=False, system="You are the critic.")
    [recorded] = gemini_stub.requests_for("r")
    assert recorded.model == MODEL
    assert recorded.system_instruction == "You are the critic."
    assert recorded.tool_names == ["web_search", "web_fetch"]
    declaration = recorded.body["tools"][0]["functionDeclarations"][0]
    assert declaration["description"] == "Search the web."
    assert recorded.last_user_text() == "hello"
    assert recorded.received_at <= time.time()


@pytest.mark.parametrize("api_version", ["v1", "v1beta"])
async def test_v1_and_v1beta_paths(gemini_stub: GeminiStub, api_version: str) -> None:
    gemini_stub.add_script(Script(name="r", replies=[Reply(text="ok")]))
    options = types.HttpOptions(base_url=gemini_stub.base_url, api_version=api_version)
    client = genai.Client(api_key="k", http_options=options)
    try:
        response = await client.aio.models.generate_content(model=MODEL, contents="hi")
    finally:
        await client.aio.aclose()
    assert response.text == "ok"
    [recorded] = gemini_stub.requests
    assert recorded.api_version == api_version
    assert recorded.path == f"/{api_version}/models/{MODEL}:generateContent"


async def test_vertex_style_path(gemini_stub: GeminiStub) -> None:
    gemini_stub.add_script(Script(name="r", match_model=MODEL, replies=[Reply(text="vertex")]))
    url = (
        f"{gemini_stub.base_url}/v1beta1/projects/p/locations/us-central1/publishers/google"
        f"/models/{MODEL}:generateContent"
    )
    async with aiohttp.ClientSession() as http, http.post(url, json={"contents": []}) as resp:
        body = await resp.json()
    assert body["candidates"][0]["content"]["parts"] == [{"text": "vertex"}]
    assert gemini_stub.requests[0].api_version == "v1beta1"


async def test_malformed_and_empty_replies_reach_the_client(
    gemini_stub: GeminiStub, genai_client: genai.Client
) -> None:
    gemini_stub.add_script(
        Script(name="r", replies=[Reply(malformed=True), Reply(malformed=True), Reply(empty=True)])
    )
    with pytest.raises(json.JSONDecodeError):
        await generate(genai_client, stream=False)
    with pytest.raises(errors.UnknownApiResponseError):
        await generate(genai_client, stream=True)
    assert not (await generate(genai_client, stream=False)).candidates


async def test_control_api_from_another_client(
    gemini_stub: GeminiStub, genai_client: genai.Client
) -> None:
    script = Script(name="remote", match_system="researcher", replies=[Reply(text="from json")])
    base = gemini_stub.base_url
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{base}/_stub/scripts", json=[script_to_json(script)]) as resp:
            assert resp.status == 200
            assert await resp.json() == {"added": ["remote"]}
        async with http.post(f"{base}/_stub/scripts", json={"name": "bad", "replies": [{}]}) as r:
            assert r.status == 400
            assert "needs text" in (await r.json())["error"]["message"]
        assert (await generate(genai_client, stream=False)).text == "from json"
        async with http.get(f"{base}/_stub/requests", params={"script": "remote"}) as resp:
            [recorded] = (await resp.json())["requests"]
        assert recorded["body"]["systemInstruction"]["parts"] == [
            {"text": "You are the researcher."}
        ]
        async with http.get(f"{base}/_stub/scripts") as resp:
            assert (await resp.json())["scripts"] == [{"name": "remote", "used": 1, "remaining": 0}]
        async with http.post(f"{base}/_stub/reset") as resp:
            assert resp.status == 200
    assert gemini_stub.requests == []
    assert gemini_stub.scripts() == []


@pytest.mark.parametrize(("flags", "recorded"), [((), 1), (("--no-record-requests",), 0)])
async def test_standalone_process_with_a_scripts_file(
    tmp_path: Path, flags: tuple[str, ...], recorded: int
) -> None:
    """The stub alone, as the benchmarks run it (``--no-record-requests``: a long benchmark's
    recorded bodies would make the stub's garbage collections pause its replies)."""
    scripts = tmp_path / "scripts.json"
    scripts.write_text(json.dumps({"scripts": [{"name": "cli", "replies": [{"text": "hi"}]}]}))
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agentfleet.gemini_stub",
        "--port",
        "0",
        "--scripts",
        str(scripts),
        *flags,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(30):
            line = (await process.stdout.readline()).decode()
        assert "scripted offline model" in line
        base_url = line.split(" at ")[1].split()[0]
        client = genai.Client(api_key="k", http_options=types.HttpOptions(base_url=base_url))
        try:
            response = await client.aio.models.generate_content(model=MODEL, contents="hi")
        finally:
            await client.aio.aclose()
        assert response.text == "hi"
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"{base_url}/_stub/requests") as resp,
        ):
            assert len((await resp.json())["requests"]) == recorded
    finally:
        process.terminate()
        assert await process.wait() == 0


# --- GenaiModelClient ------------------------------------------------------------------------


async def call(client: GenaiModelClient, contents: list[types.Content] | None = None):
    return await client.generate(
        model=MODEL,
        system_instruction="You are the researcher.",
        contents=contents or [user("go")],
        tools=[SEARCH_TOOL],
        config=types.GenerateContentConfig(temperature=0.1, max_output_tokens=256),
    )


async def test_model_client_returns_calls_usage_and_sends_config(
    gemini_stub: GeminiStub, gemini_model_client: GenaiModelClient
) -> None:
    calls = [Call("web_search", {"query": "a"}), Call("web_search", {"query": "b"})]
    gemini_stub.add_script(
        Script(
            name="r",
            replies=[
                Reply(
                    text="two searches",
                    calls=calls,
                    usage=Usage(prompt_tokens=9, candidates_tokens=3),
                )
            ],
        )
    )
    reply = await call(gemini_model_client)
    assert reply.text == "two searches"
    assert [c.args["query"] for c in reply.function_calls] == ["a", "b"]
    assert (reply.usage.prompt_tokens, reply.usage.output_tokens) == (9, 3)
    assert reply.usage.total_tokens == 12
    assert reply.finish_reason == "STOP"
    assert reply.attempts == 1
    assert reply.content.role == "model"
    [recorded] = gemini_stub.requests
    assert recorded.generation_config == {"temperature": 0.1, "maxOutputTokens": 256}
    assert recorded.tool_names == ["web_search", "web_fetch"]


async def test_model_client_retries_429_then_succeeds(
    gemini_stub: GeminiStub, gemini_model_client: GenaiModelClient
) -> None:
    gemini_stub.add_script(
        Script(
            name="r", replies=[Reply(error_status=429), Reply(error_status=503), Reply(text="ok")]
        )
    )
    reply = await call(gemini_model_client)
    assert reply.text == "ok"
    assert reply.attempts == 3
    assert gemini_stub.used("r") == 3


async def test_model_client_gives_up_after_n_500s(gemini_stub: GeminiStub) -> None:
    gemini_stub.add_script(
        Script(name="r", replies=[Reply(error_status=500, error_message="boom")] * 5)
    )
    client = model_client_for(gemini_stub, retry=RetryPolicy.for_tests(max_attempts=4))
    try:
        with pytest.raises(TransientModelError) as caught:
            await call(client)
    finally:
        await client.aclose()
    assert (caught.value.status_code, caught.value.message) == (500, "boom")
    assert caught.value.attempts == 4
    assert gemini_stub.used("r") == 4


async def test_model_client_does_not_retry_a_bad_request(
    gemini_stub: GeminiStub, gemini_model_client: GenaiModelClient
) -> None:
    gemini_stub.add_script(
        Script(name="r", replies=[Reply(error_status=400, error_message="bad schema")])
    )
    with pytest.raises(ModelRequestError, match="bad schema") as caught:
        await call(gemini_model_client)
    assert caught.value.status_code == 400
    assert gemini_stub.used("r") == 1


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (Reply(malformed=True), "not valid JSON"),
        (Reply(empty=True), "no candidates"),
        (Reply(empty=True, block_reason="SAFETY"), "prompt blocked: SAFETY"),
    ],
)
async def test_model_client_malformed_replies(
    gemini_stub: GeminiStub, gemini_model_client: GenaiModelClient, reply: Reply, message: str
) -> None:
    gemini_stub.add_script(Script(name="r", replies=[reply]))
    with pytest.raises(MalformedModelReply, match=message) as caught:
        await call(gemini_model_client)
    assert caught.value.status_code == 200
    assert gemini_stub.used("r") == 1


async def test_cancelling_a_hanging_call_is_prompt(
    gemini_stub: GeminiStub, gemini_model_client: GenaiModelClient
) -> None:
    gemini_stub.add_script(Script(name="r", replies=[Reply(hang=True)]))
    task = asyncio.create_task(call(gemini_model_client))
    async with asyncio.timeout(10):
        await gemini_stub.wait_for_requests(1, script="r")
    started = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - started < 1.0


async def test_a_deadline_interrupts_a_delayed_reply(
    gemini_stub: GeminiStub, gemini_model_client: GenaiModelClient
) -> None:
    gemini_stub.add_script(Script(name="r", replies=[Reply(text="late", delay_s=30)]))
    pending = asyncio.create_task(call(gemini_model_client))
    # The deadline starts once the stub holds the request: on a loaded machine a deadline
    # from before the send could expire before the request left.
    async with asyncio.timeout(10):
        await gemini_stub.wait_for_requests(1, script="r")
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.2):
            await pending
    assert pending.cancelled()
    assert gemini_stub.used("r") == 1


async def test_policy_drives_a_conversation(
    gemini_stub: GeminiStub, gemini_model_client: GenaiModelClient
) -> None:
    def researcher(request: StubRequest) -> Reply:
        done = len(request.function_responses())
        if done < 2:
            return Reply(calls=[Call("web_search", {"query": f"q{done}"})])
        return Reply(text=f"report from {done} searches")

    gemini_stub.add_script(Script(name="researcher", match_system="researcher", policy=researcher))
    contents = [user("research gemini")]
    while True:
        reply = await call(gemini_model_client, contents)
        contents.append(reply.content)
        if not reply.function_calls:
            break
        contents.append(
            types.Content(
                role="user",
                parts=[
                    types.Part.from_function_response(name=c.name, response={"hits": [c.args]})
                    for c in reply.function_calls
                ],
            )
        )
    assert reply.text == "report from 2 searches"
    assert len(gemini_stub.requests_for("researcher")) == 3


async def test_contents_round_trip_through_json(
    gemini_stub: GeminiStub, gemini_model_client: GenaiModelClient
) -> None:
    gemini_stub.add_script(
        Script(
            name="r", replies=[Reply(text="t", calls=[Call("f", {"n": [1, {"x": None}]}, id="c1")])]
        )
    )
    reply = await call(gemini_model_client)
    produced = [
        user("go"),
        reply.content,
        types.Content(
            role="user",
            parts=[types.Part.from_function_response(name="f", response={"ok": True, "v": 1.5})],
        ),
        types.Content(
            role="model",
            parts=[types.Part(text="thinking", thought=True, thought_signature=b"\x00\xffsig")],
        ),
    ]
    for content in produced:
        stored = json.loads(json.dumps(content_to_json(content)))
        rebuilt = content_from_json(stored)
        assert rebuilt == content
        assert content_to_json(rebuilt) == stored
