"""The cheap generate_content path sends what google-genai itself sends, and parses alike.

Both paths end in ``BaseApiClient.async_request``; it is replaced here by a recorder that
answers a canned body, so the comparison covers the path, the request dict and the options
for the Gemini API and Vertex AI conversions of the pinned google-genai.
"""

from __future__ import annotations

import gc
import json
from typing import Any

import pytest
from google import genai
from google.genai import types
from google.genai.types import HttpResponse as SdkHttpResponse

from agentfleet.llm.genai_fast import FastGenerate

ANSWER = {
    "candidates": [
        {
            "content": {
                "role": "model",
                "parts": [
                    {"text": "thinking", "thought": True, "thoughtSignature": "AP9zaWc="},
                    {"functionCall": {"name": "echo", "args": {"text": "hi"}, "id": "c9"}},
                ],
            },
            "finishReason": "STOP",
            "index": 0,
        }
    ],
    "usageMetadata": {"promptTokenCount": 7, "candidatesTokenCount": 3, "totalTokenCount": 10},
    "modelVersion": "stub",
    "responseId": "r1",
}


def _conversation() -> list[types.Content]:
    return [
        types.Content(role="user", parts=[types.Part(text="go")]),
        types.Content(
            role="model",
            parts=[
                types.Part(text="t", thought=True, thought_signature=b"\x00\xffsig"),
                types.Part(
                    function_call=types.FunctionCall(name="echo", args={"a": [1, 2]}, id="c1")
                ),
            ],
        ),
        types.Content(
            role="user",
            parts=[
                types.Part(
                    function_response=types.FunctionResponse(
                        id="c1", name="echo", response={"output": {"a": [1, 2]}}
                    )
                )
            ],
        ),
    ]


def _record(client: genai.Client) -> list[tuple[str, dict[str, Any], Any]]:
    sent: list[tuple[str, dict[str, Any], Any]] = []
    api = client.aio.models._api_client

    async def async_request(
        method: str, path: str, request_dict: dict[str, Any], http_options: Any = None
    ) -> SdkHttpResponse:
        # A JSON round trip: what would go on the wire.
        sent.append((path, json.loads(json.dumps(request_dict)), http_options))
        return SdkHttpResponse(headers={}, body=json.dumps(ANSWER))

    api.async_request = async_request  # type: ignore[method-assign]
    return sent


CLIENTS = {
    "gemini": lambda: genai.Client(api_key="k", http_options={"base_url": "http://x"}),
    "vertex": lambda: genai.Client(vertexai=True, project="p", location="us-central1"),
}


@pytest.mark.parametrize("backend", sorted(CLIENTS))
async def test_fast_path_sends_and_parses_like_the_sdk(backend: str) -> None:
    client = CLIENTS[backend]()
    sent = _record(client)
    tools = [
        types.Tool(
            function_declarations=[
                types.FunctionDeclaration(
                    name="echo",
                    description="echoes",
                    parameters_json_schema={"type": "object", "properties": {}},
                )
            ]
        )
    ]
    config = types.GenerateContentConfig(temperature=0.2, max_output_tokens=64)
    fast = FastGenerate(client)
    head = fast.head_for(model="stub", system_instruction="be brief", tools=tools, config=config)
    contents = _conversation()
    assert fast.supports(head, contents)

    expected = await client.aio.models.generate_content(
        model="stub", contents=contents, config=head.config
    )
    got = await fast.generate(head, contents)
    got_again = await fast.generate(head, contents)  # from the per-content cache

    assert sent[1] == sent[0]
    assert sent[2] == sent[0]
    assert sent[0][1]["contents"][1]["parts"][0]["thoughtSignature"] == "AP9zaWc="
    assert got.model_dump(exclude={"sdk_http_response"}) == expected.model_dump(
        exclude={"sdk_http_response"}
    )
    assert got_again.candidates == expected.candidates


async def test_head_is_built_once_per_turn_and_contents_are_forgotten() -> None:
    client = CLIENTS["gemini"]()
    _record(client)
    fast = FastGenerate(client)
    config = types.GenerateContentConfig()
    first = fast.head_for(model="m", system_instruction=None, tools=[], config=config)
    assert fast.head_for(model="m", system_instruction=None, tools=[], config=config) is first
    other = fast.head_for(model="m", system_instruction="s", tools=[], config=config)
    assert other is not first
    contents = _conversation()
    await fast.generate(first, contents)
    assert len(fast._contents) == 3
    del contents
    gc.collect()
    assert fast._contents == {}


def test_unusual_requests_take_the_sdk_path() -> None:
    client = CLIENTS["gemini"]()
    fast = FastGenerate(client)
    head = fast.head_for(model="m", system_instruction=None, tools=[], config=None)
    assert not fast.supports(head, [])
    assert not fast.supports(head, [{"role": "user", "parts": [{"text": "x"}]}])  # type: ignore[list-item]
