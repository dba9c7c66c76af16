"""Request heads are shared by runs of equal definitions (issue #4): a turn built from new
but equal config and tool objects reuses the head instead of building one; anything whose
JSON might not tell turns apart (a response schema class) gets its own."""

from __future__ import annotations

import pydantic
from google import genai
from google.genai import types

from agentfleet.llm.genai_fast import FastGenerate


def _fast() -> FastGenerate:
    return FastGenerate(genai.Client(api_key="k", http_options={"base_url": "http://x"}))


def _tools(description: str = "echoes") -> list[types.Tool]:
    return [
        types.Tool(
            function_declarations=[
                types.FunctionDeclaration(
                    name="echo",
                    description=description,
                    parameters_json_schema={"type": "object", "properties": {}},
                )
            ]
        )
    ]


def test_equal_turns_share_a_head_and_different_ones_do_not() -> None:
    fast = _fast()

    def head(temperature: float = 0.5, description: str = "echoes") -> object:
        return fast.head_for(
            model="m",
            system_instruction="s",
            tools=_tools(description),
            config=types.GenerateContentConfig(temperature=temperature),
        )

    first = head()
    assert head() is first
    assert head(temperature=0.7) is not first
    assert head(description="other") is not first
    assert fast.head_for(
        model="m", system_instruction="t", tools=_tools(), config=types.GenerateContentConfig()
    ) is not fast.head_for(
        model="m", system_instruction="s", tools=_tools(), config=types.GenerateContentConfig()
    )


def test_a_response_schema_class_is_never_shared_by_value() -> None:
    class Answer(pydantic.BaseModel):
        text: str

    fast = _fast()

    def head() -> object:
        config = types.GenerateContentConfig(
            response_mime_type="application/json", response_schema=Answer
        )
        return fast.head_for(model="m", system_instruction=None, tools=[], config=config)

    assert head() is not head()
