"""The fast path's converted conversations (:mod:`agentfleet.llm.genai_wires`): a call of a
growing conversation converts only what was appended, and whatever happens to the
conversation (a content replaced, the list cut short, a content gone) the wire form is the
one a fresh conversion gives."""

from __future__ import annotations

import gc
import json
from typing import Any

import pytest
from google.genai import models, types

from agentfleet.llm.genai_selfcheck import sample_contents
from agentfleet.llm.genai_wires import Wires


def _fresh(contents: list[types.Content]) -> tuple[list[dict[str, Any]], list[bytes]]:
    return Wires(vertex=False).of(contents)


def _user(text: str) -> types.Content:
    return types.Content(role="user", parts=[types.Part(text=text)])


@pytest.fixture
def conversions(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts google-genai conversions (one per content converted) by Wires made after."""
    seen: list[int] = []
    convert = models._Content_to_mldev

    def counting(*args: Any) -> Any:
        seen.append(1)
        return convert(*args)

    monkeypatch.setattr(models, "_Content_to_mldev", counting)
    return seen


def test_a_growing_conversation_converts_only_what_it_gained(conversions: list[int]) -> None:
    wires = Wires(vertex=False)
    contents = sample_contents()
    assert wires.of(contents) == _fresh(contents)
    conversions.clear()
    contents.append(_user("more"))
    values, texts = wires.of(contents)
    assert conversions == [1]
    assert (values, texts) == _fresh(contents)
    assert [json.loads(t) for t in texts] == values


def test_a_changed_conversation_is_converted_as_it_is_now() -> None:
    wires = Wires(vertex=False)
    contents = sample_contents()
    wires.of(contents)
    replaced = [contents[0], _user("instead"), *contents[2:]]
    assert wires.of(replaced) == _fresh(replaced)
    shorter = contents[:2]
    assert wires.of(shorter) == _fresh(shorter)
    assert wires.of(contents) == _fresh(contents)


def test_a_content_gone_drops_its_conversations_record() -> None:
    wires = Wires(vertex=False)
    contents = sample_contents()
    wires.of(contents)
    last = contents.pop()
    del last
    gc.collect()
    assert len(wires) == 2
    assert wires._conversations == {}  # rebuilt at the next call
    contents.append(_user("next"))
    assert wires.of(contents) == _fresh(contents)
    del contents
    gc.collect()
    assert len(wires) == 0
    assert wires._conversations == {}
