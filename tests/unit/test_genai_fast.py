"""The fast generate path's self-check (issue #17): it passes on the pinned google-genai for
both backends (the fast path's URL, body and parsed answer equal the SDK's own), names a
private name an upgrade removed, refuses a fast path whose body differs, and lists every
private name the fast path's modules use. Plus the per-content cache and the switch setting.
"""

from __future__ import annotations

import ast
import gc
import inspect
import json
from typing import Any

import pytest
from google import genai
from google.genai import models, types
from google.genai._api_client import HttpResponse

from agentfleet.config import ConfigError, load_settings
from agentfleet.llm import (
    GenaiModelClient,
    genai_fast,
    genai_response,
    genai_transport,
    genai_wires,
)
from agentfleet.llm.genai_fast import FastGenerate
from agentfleet.llm.genai_selfcheck import (
    INSTANCE_NAMES,
    PRIVATE_NAMES,
    SAMPLE_ANSWER,
    check_fast_path,
    missing_names,
    sample_contents,
)


@pytest.mark.parametrize("vertex", [False, True], ids=["gemini", "vertex"])
def test_self_check_passes_on_the_pinned_google_genai(vertex: bool) -> None:
    assert missing_names() == []
    assert check_fast_path(vertex=vertex) is None


def test_self_check_names_a_private_name_an_upgrade_removed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delattr(models, "_GenerateContentResponse_from_vertex")
    reason = check_fast_path(vertex=False)
    assert reason is not None
    assert "google.genai.models._GenerateContentResponse_from_vertex" in reason


def test_self_check_refuses_a_fast_path_whose_body_differs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    build = FastGenerate.request_body

    def without_system_instruction(self: FastGenerate, head: Any, contents: Any) -> Any:
        body, _ = build(self, head, contents)
        body.pop("systemInstruction")
        prefix = genai_transport.body_prefix({k: v for k, v in body.items() if k != "contents"})
        wires = [json.dumps(c).encode() for c in body["contents"]]
        return body, genai_transport.encode_body(prefix, wires)

    monkeypatch.setattr(FastGenerate, "request_body", without_system_instruction)
    reason = check_fast_path(vertex=False)
    assert reason is not None
    assert "request body differs" in reason


def _private_names_used(module: Any) -> set[str]:
    """Attributes with a leading underscore read on anything but ``self``, and every name
    read from google-genai's internal modules."""
    used: set[str] = set()
    for node in ast.walk(ast.parse(inspect.getsource(module))):
        if not isinstance(node, ast.Attribute):
            continue
        owner = node.value.id if isinstance(node.value, ast.Name) else None
        if owner in ("models", "_common", "_extra_utils") or (
            node.attr.startswith("_") and owner != "self"
        ):
            used.add(node.attr)
    return used


def test_every_private_name_the_fast_path_uses_is_checked() -> None:
    checked = {name.rsplit(".", 1)[-1] for name in (*PRIVATE_NAMES, *INSTANCE_NAMES)}
    ours = {"_post", "_build_head", "_plan", "_field"}
    for module in (genai_fast, genai_transport, genai_response, genai_wires):
        assert _private_names_used(module) - ours <= checked, module.__name__


class Wire:
    """Stands in for the one HTTP call (``_async_request_once``): answers the sample."""

    def __init__(self) -> None:
        self.sent: list[Any] = []

    async def __call__(self, http_request: Any, stream: bool = False, **_: Any) -> HttpResponse:
        self.sent.append(http_request.data)
        return HttpResponse(headers={}, response_stream=[json.dumps(SAMPLE_ANSWER)])


async def test_contents_are_converted_once_and_forgotten_with_them() -> None:
    client = genai.Client(api_key="k", http_options={"base_url": "http://127.0.0.1:9"})
    wire = Wire()
    client.aio.models._api_client._async_request_once = wire  # type: ignore[method-assign]
    fast = FastGenerate(client)
    config = types.GenerateContentConfig()
    first = fast.head_for(model="m", system_instruction=None, tools=[], config=config)
    assert fast.head_for(model="m", system_instruction=None, tools=[], config=config) is first
    contents = sample_contents()
    await fast.generate(first, contents)
    await fast.generate(first, contents)
    assert len(fast.wires) == 3
    assert wire.sent[0] == wire.sent[1]
    del contents
    gc.collect()
    assert len(fast.wires) == 0


def test_unusual_requests_take_the_sdk_path() -> None:
    fast = FastGenerate(genai.Client(api_key="k", http_options={"base_url": "http://x"}))
    head = fast.head_for(model="m", system_instruction=None, tools=[], config=None)
    assert not fast.supports(head, [])
    assert not fast.supports(head, [{"role": "user", "parts": [{"text": "x"}]}])  # type: ignore[list-item]


def test_the_switch_setting() -> None:
    assert load_settings({}).genai_fast_path is True
    assert load_settings({"AGENTFLEET_GENAI_FAST_PATH": "off"}).genai_fast_path is False
    assert load_settings({"AGENTFLEET_GENAI_FAST_PATH": "ON"}).genai_fast_path is True
    with pytest.raises(ConfigError, match="AGENTFLEET_GENAI_FAST_PATH"):
        load_settings({"AGENTFLEET_GENAI_FAST_PATH": "fast"})


async def test_a_call_missing_or_misnaming_an_argument_is_refused() -> None:
    client = GenaiModelClient(genai.Client(api_key="k", http_options={"base_url": "http://x"}))
    try:
        with pytest.raises(TypeError, match=r"missing \['contents'\]"):
            await client.generate(model="m", system_instruction=None)  # type: ignore[call-arg]
        with pytest.raises(TypeError, match=r"unexpected \['tool'\]"):
            await client.generate(model="m", system_instruction=None, contents=[], tool=[])  # type: ignore[call-arg]
    finally:
        await client.aclose()
