"""The transport of the fast generate path (issues #4, #17): the body goes out as bytes
assembled from contents encoded once, the same JSON as the SDK's own body (and the same
bytes ``json.dumps`` makes of the fast path's dict); a single-attempt client sends once
through its own ``_async_request_once``, without tenacity and without any google-genai
object changed; a retrying client keeps tenacity's retries.

``BaseApiClient._async_request_once`` (the one HTTP call) is replaced here, in the tests
only, by a recorder that answers a canned body, so the SDK's whole path above it runs.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import tenacity
from google import genai
from google.genai import errors, types
from google.genai._api_client import HttpResponse

from agentfleet.config import load_settings
from agentfleet.llm import build_genai_client
from agentfleet.llm.genai_fast import FastGenerate
from agentfleet.llm.genai_transport import body_prefix, encode_body

ANSWER = {
    "candidates": [
        {"content": {"role": "model", "parts": [{"text": "ok"}]}, "finishReason": "STOP"}
    ],
    "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 1, "totalTokenCount": 4},
}


class Wire:
    """Stands in for the HTTP call: records what would be sent, answers ``status``."""

    def __init__(self, status: int = 200) -> None:
        self.sent: list[Any] = []
        self.status = status

    async def __call__(self, http_request: Any, stream: bool = False, **_: Any) -> HttpResponse:
        self.sent.append(http_request.data)
        if self.status != 200:
            raise errors.APIError(self.status, {"error": {"message": "busy", "code": 503}})
        return HttpResponse(headers={}, response_stream=[json.dumps(ANSWER)])


def _client() -> genai.Client:
    settings = load_settings({}).with_overrides(
        gemini_base_url="http://127.0.0.1:9", gemini_api_key=None, gemini_use_vertex=False
    )
    return build_genai_client(settings)


def _conversation() -> list[types.Content]:
    return [
        types.Content(role="user", parts=[types.Part(text="héllo \u2603")]),
        types.Content(
            role="model",
            parts=[
                types.Part(text="t", thought=True, thought_signature=b"\x00\xffsig"),
                types.Part(function_call=types.FunctionCall(name="echo", args={"a": [1, 2.5]})),
            ],
        ),
        types.Content(
            role="user",
            parts=[
                types.Part(
                    function_response=types.FunctionResponse(
                        name="echo", response={"output": {"a": [1, 2.5], "n": None}}
                    )
                )
            ],
        ),
    ]


@pytest.mark.parametrize(
    "fields",
    [{}, {"_url": {"model": "m"}}, {"_url": {}, "systemInstruction": {"parts": [{"text": "é"}]}}],
)
def test_encoded_body_is_what_json_dumps_makes(fields: dict[str, Any]) -> None:
    contents = [{"role": "user", "parts": [{"text": "a\u2603"}]}, {"role": "model", "parts": []}]
    sent = {k: v for k, v in fields.items() if not k.startswith("_")} | {"contents": contents}
    encoded = encode_body(body_prefix(fields), [json.dumps(c).encode() for c in contents])
    assert encoded == json.dumps(sent).encode()


async def test_fast_path_sends_the_sdks_body_pre_encoded() -> None:
    client = _client()
    wire = Wire()
    client.aio.models._api_client._async_request_once = wire  # type: ignore[method-assign]
    fast = FastGenerate(client)
    tools = [
        types.Tool(
            function_declarations=[
                types.FunctionDeclaration(
                    name="echo", parameters_json_schema={"type": "object", "properties": {}}
                )
            ]
        )
    ]
    head = fast.head_for(
        model="stub",
        system_instruction="be brief",
        tools=tools,
        config=types.GenerateContentConfig(),
    )
    contents = _conversation()
    await client.aio.models.generate_content(model="stub", contents=contents, config=head.config)
    await fast.generate(head, contents)
    await fast.generate(head, contents)  # from the per-content cache
    sdk_body, fast_body, cached_body = wire.sent
    assert isinstance(sdk_body, dict)
    assert isinstance(fast_body, bytes)
    # The same JSON (the SDK puts "contents" first, the fast path last).
    assert json.loads(fast_body) == json.loads(json.dumps(sdk_body))
    assert cached_body == fast_body


async def test_a_single_attempt_client_sends_once_without_tenacity() -> None:
    client = _client()
    api = client.aio.models._api_client
    retry_wrapper = api._async_retry
    wire = Wire(status=503)
    api._async_request_once = wire  # type: ignore[method-assign]
    fast = FastGenerate(client)
    head = fast.head_for(model="stub", system_instruction=None, tools=[], config=None)
    with pytest.raises(errors.APIError) as raised:
        await fast.generate(head, _conversation())
    assert raised.value.code == 503
    # One call, with the pre-encoded bytes: tenacity's path would have passed the dict.
    assert len(wire.sent) == 1
    assert isinstance(wire.sent[0], bytes)
    assert api._async_retry is retry_wrapper
    assert isinstance(retry_wrapper, tenacity.AsyncRetrying)


async def test_a_retrying_client_keeps_its_retries() -> None:
    client = genai.Client(
        api_key="k",
        http_options=types.HttpOptions(
            base_url="http://127.0.0.1:9",
            retry_options=types.HttpRetryOptions(attempts=3, initial_delay=0.001, max_delay=0.01),
        ),
    )
    wire = Wire(status=503)
    client.aio.models._api_client._async_request_once = wire  # type: ignore[method-assign]
    fast = FastGenerate(client)
    head = fast.head_for(model="stub", system_instruction=None, tools=[], config=None)
    with pytest.raises(errors.APIError):
        await fast.generate(head, _conversation())
    assert len(wire.sent) == 3
