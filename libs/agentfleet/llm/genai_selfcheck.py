"""The self-check a model client runs before it uses the fast path.

:mod:`agentfleet.llm.genai_fast` and :mod:`agentfleet.llm.genai_transport` call google-genai
internals (:data:`PRIVATE_NAMES`). A google-genai upgrade that moves or changes one must not
break model calls, so :func:`check_fast_path` verifies, once per model client, that every
name is there and that the fast path builds a sample request exactly as the SDK does: the
same URL and JSON body (sample: a thought signature, a function call and its response,
tools, a system instruction, generation settings) and the same parsed response (the sample
answer carries unknown fields, which both must drop); and for a streamed call the same URL
and body and the same parsed chunks (:data:`SAMPLE_CHUNKS`, over SSE). The SDK's side is its
own public call, ``client.models.generate_content`` (``generate_content_stream``), on a
client of the same backend whose HTTP client is an ``httpx`` mock transport: nothing leaves
the process. When the check fails, the model client takes the SDK's public path and says why.
"""

from __future__ import annotations

import importlib
import inspect
import json
from functools import reduce
from typing import Any

from google import genai
from google.genai import types

from agentfleet.llm.genai_fast import FastGenerate, RequestHead

PRIVATE_NAMES = (
    "google.genai.models._Content_to_mldev",
    "google.genai.models._Content_to_vertex",
    "google.genai.models._GenerateContentParameters_to_mldev",
    "google.genai.models._GenerateContentParameters_to_vertex",
    "google.genai.models._GenerateContentResponse_from_mldev",
    "google.genai.models._GenerateContentResponse_from_vertex",
    "google.genai.models.AsyncModels._generate_content",
    "google.genai.models.AsyncModels._generate_content_stream",
    "google.genai.types._GenerateContentParameters",
    "google.genai.types.GenerateContentResponse._from_response",
    "google.genai._common.convert_to_dict",
    "google.genai._common.encode_unserializable_types",
    "google.genai._common._is_struct_type",
    "google.genai._common._as_base_model_type",
    "google.genai._extra_utils.should_enable_automatic_continuation",
    "google.genai._extra_utils.should_continue_generation",
    "google.genai._extra_utils.prepare_continuation_config",
    "google.genai._extra_utils.merge_continuation_responses",
    "google.genai._extra_utils.StreamContinuation",
    "google.genai._extra_utils.StreamContinuation.start_hop",
    "google.genai._extra_utils.StreamContinuation.observe",
    "google.genai._extra_utils.StreamContinuation.end_hop",
    "google.genai._api_client.BaseApiClient._build_request",
    "google.genai._api_client.BaseApiClient._async_request_once",
    "google.genai._api_client.BaseApiClient._verify_response",
)
"""Every google-genai name the fast path uses that is not public API (module-level
functions of internal modules count: they have no stability promise)."""

INSTANCE_NAMES = ("aio.models._api_client", "aio.models._api_client._http_options")
"""Private attributes the fast path reads on a ``genai.Client`` (set by its constructor)."""

_MODULES = (
    "google.genai.models",
    "google.genai.types",
    "google.genai._common",
    "google.genai._extra_utils",
    "google.genai._api_client",
)

SAMPLE_MODEL = "self-check-model"
SAMPLE_ANSWER = {
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
            "fieldFromANewerApi": {"x": 1},
        }
    ],
    "usageMetadata": {"promptTokenCount": 7, "candidatesTokenCount": 3, "totalTokenCount": 10},
    "modelVersion": "stub",
    "responseId": "r1",
    "anotherNewField": [1, 2],
}

SAMPLE_CHUNKS = [
    {
        "candidates": [
            {"content": {"role": "model", "parts": [{"text": "thi", "thought": True}]}, "index": 0}
        ],
        "modelVersion": "stub",
        "responseId": "r2",
    },
    {
        "candidates": [
            {
                "content": {
                    "role": "model",
                    "parts": [
                        {"text": "nking", "thought": True, "thoughtSignature": "AP9zaWc="},
                        {"text": "ok"},
                    ],
                },
                "index": 0,
                "fieldFromANewerApi": 1,
            }
        ],
        "modelVersion": "stub",
        "responseId": "r2",
    },
    SAMPLE_ANSWER,
]
"""A streamed answer: thought and text pieces, then :data:`SAMPLE_ANSWER` as the last chunk."""


def sample_contents() -> list[types.Content]:
    """A conversation with every part kind a run sends: text, a thought with its signature
    (bytes), a function call and its response."""
    return [
        types.Content(role="user", parts=[types.Part(text="go \u2603")]),
        types.Content(
            role="model",
            parts=[
                types.Part(text="t", thought=True, thought_signature=b"\x00\xffsig"),
                types.Part(
                    function_call=types.FunctionCall(name="echo", args={"a": [1, 2.5]}, id="c1")
                ),
            ],
        ),
        types.Content(
            role="user",
            parts=[
                types.Part(
                    function_response=types.FunctionResponse(
                        id="c1", name="echo", response={"output": {"a": [1, 2.5], "n": None}}
                    )
                )
            ],
        ),
    ]


def sample_tools() -> list[types.Tool]:
    return [
        types.Tool(
            function_declarations=[
                types.FunctionDeclaration(
                    name="echo",
                    description="echoes",
                    parameters_json_schema={
                        "type": "object",
                        "properties": {"text": {"type": "string"}},
                    },
                )
            ]
        )
    ]


def missing_names(client: genai.Client | None = None) -> list[str]:
    """The names of :data:`PRIVATE_NAMES` (and of :data:`INSTANCE_NAMES` on ``client``)
    that the installed google-genai lacks."""
    missing = [name for name in PRIVATE_NAMES if not _resolves(name)]
    if client is not None:
        missing += [f"Client.{n}" for n in INSTANCE_NAMES if not _has_path(client, n)]
    return missing


def check_fast_path(*, vertex: bool) -> str | None:
    """None when the fast path may serve a client of this backend (Vertex AI or the Gemini
    API); else why not, in one line."""
    version = getattr(genai, "__version__", "?")
    missing = missing_names()
    if missing:
        return f"google-genai {version} lacks {', '.join(missing)}"
    try:
        return _compare_sample(vertex, version)
    except Exception as exc:  # whatever an internal change breaks, the SDK path still works
        return f"the self-check failed on google-genai {version}: {exc!r}"


class _Recorder:
    """The mock transport's handler: keeps each request, answers :data:`SAMPLE_ANSWER`."""

    def __init__(self, httpx: Any) -> None:
        self.httpx = httpx
        self.requests: list[Any] = []

    def __call__(self, request: Any) -> Any:
        self.requests.append(request)
        if "streamGenerateContent" not in str(request.url):
            return self.httpx.Response(200, json=SAMPLE_ANSWER)
        events = "".join(f"data: {json.dumps(chunk)}\r\n\r\n" for chunk in SAMPLE_CHUNKS)
        return self.httpx.Response(
            200, content=events.encode(), headers={"Content-Type": "text/event-stream"}
        )


_ORACLES: dict[bool, tuple[genai.Client, _Recorder]] = {}
"""Per backend, the SDK client the check compares with: built once per process (about
50 ms: google-genai makes its SSL contexts), as nothing in it varies between checks."""


def _oracle(vertex: bool) -> tuple[genai.Client, _Recorder]:
    if vertex not in _ORACLES:
        # google-genai accepts the clients of httpx2 (its default) or httpx.
        try:
            httpx = importlib.import_module("httpx2")
        except ImportError:
            httpx = importlib.import_module("httpx")
        recorder = _Recorder(httpx)
        options = types.HttpOptions(
            httpx_client=httpx.Client(transport=httpx.MockTransport(recorder)),
            retry_options=types.HttpRetryOptions(attempts=1),
        )
        # An API key also on Vertex AI (express mode): no credentials to look up.
        client = genai.Client(vertexai=vertex, api_key="self-check", http_options=options)
        _ORACLES[vertex] = (client, recorder)
    return _ORACLES[vertex]


def _compare_sample(vertex: bool, version: str) -> str | None:
    client, recorder = _oracle(vertex)
    missing = missing_names(client)
    if missing:
        return f"google-genai {version} lacks {', '.join(missing)}"
    fast = FastGenerate(client)
    api = client.aio.models._api_client
    if not inspect.iscoroutinefunction(api._async_request_once):
        return "BaseApiClient._async_request_once is no longer a coroutine function"
    inspect.signature(api._async_request_once).bind(object(), False)
    config = types.GenerateContentConfig(temperature=0.2, max_output_tokens=64, seed=7)
    head = fast.head_for(
        model=SAMPLE_MODEL, system_instruction="be brief", tools=sample_tools(), config=config
    )
    contents = sample_contents()
    if not fast.supports(head, contents):
        return "the sample request would not take the fast path"
    recorder.requests.clear()
    expected = client.models.generate_content(
        model=SAMPLE_MODEL, contents=contents, config=head.config
    )
    (sent,) = recorder.requests
    body, encoded = fast.request_body(head, contents)
    if encoded is None or json.loads(encoded) != json.loads(sent.content):
        return f"the fast path's request body differs from google-genai {version}'s"
    sent_fields = {k: v for k, v in body.items() if not k.startswith("_")}
    if encoded != json.dumps(sent_fields).encode():
        return "the fast path's body bytes differ from json.dumps of its request"
    url = api._build_request("post", head.path, dict(body), head.http_options).url
    if recorder.httpx.URL(url) != sent.url:
        return f"the fast path's URL {url} differs from google-genai {version}'s {sent.url}"
    if fast.request_body(head, contents)[1] != encoded:
        return "the fast path's cached contents encode differently"
    got = fast.parse(head, types.HttpResponse(headers={}, body=json.dumps(SAMPLE_ANSWER)))
    if _dumped(got) != _dumped(expected):
        return f"the fast path parses the sample answer unlike google-genai {version}"
    return _compare_stream(client, recorder, fast, head, contents, encoded, version)


def _compare_stream(
    client: genai.Client,
    recorder: _Recorder,
    fast: FastGenerate,
    head: RequestHead,
    contents: list[types.Content],
    encoded: bytes,
    version: str,
) -> str | None:
    """The streamed call: URL, body and every parsed chunk as the SDK's own."""
    recorder.requests.clear()
    expected = list(
        client.models.generate_content_stream(
            model=SAMPLE_MODEL, contents=contents, config=head.config
        )
    )
    (sent,) = recorder.requests
    if json.loads(encoded) != json.loads(sent.content):
        return f"the fast path's streamed request body differs from google-genai {version}'s"
    api = client.aio.models._api_client
    url = api._build_request("post", head.stream_path, {}, head.http_options).url
    if recorder.httpx.URL(url) != sent.url:
        return f"the fast path's stream URL {url} differs from google-genai {version}'s {sent.url}"
    got = [fast.response(head, json.loads(json.dumps(c)), {}) for c in SAMPLE_CHUNKS]
    if [_dumped(c) for c in got] != [_dumped(c) for c in expected]:
        return f"the fast path parses the sample stream unlike google-genai {version}"
    return None


def _dumped(response: types.GenerateContentResponse) -> dict[str, Any]:
    return response.model_dump(exclude={"sdk_http_response"})


def _resolves(dotted: str) -> bool:
    for module_name in sorted(_MODULES, key=len, reverse=True):
        if dotted.startswith(module_name + "."):
            module = importlib.import_module(module_name)
            return _has_path(module, dotted.removeprefix(module_name + "."))
    return False


def _has_path(root: object, path: str) -> bool:
    sentinel = object()
    found = reduce(lambda obj, name: getattr(obj, name, sentinel), path.split("."), root)
    return found is not sentinel
