"""The offline stub's fallback (``agentfleet up``'s): placeholder answers that act like a model."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentfleet.gemini_stub import Call, Reply, Script, ScriptBook, ScriptExhausted
from agentfleet.gemini_stub.offline_model import (
    NOTICE,
    OFFLINE_SCRIPT_NAME,
    arguments_for,
    offline_reply,
    offline_script,
)
from agentfleet.gemini_stub.request import StubRequest

LOOKUP_SCHEMA = {
    "type": "object",
    "properties": {
        "query": {"type": "string"},
        "limit": {"type": "integer", "minimum": 3, "maximum": 10},
        "mode": {"type": "string", "enum": ["fast", "deep"]},
        "filters": {
            "type": "object",
            "properties": {"lang": {"type": "string", "maxLength": 2}, "x": {"type": "number"}},
            "required": ["lang"],
        },
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        "exact": {"type": ["boolean", "null"]},
        "optional_note": {"type": "string"},
    },
    "required": ["query", "limit", "mode", "filters", "tags", "exact"],
}


def _request(
    contents: list[dict[str, Any]], declarations: list[dict[str, Any]] | None = None
) -> StubRequest:
    body: dict[str, Any] = {"contents": contents, "systemInstruction": {"parts": [{"text": "s"}]}}
    if declarations:
        body["tools"] = [{"functionDeclarations": declarations}]
    return StubRequest(
        model="gemini-2.5-flash",
        method="generateContent",
        api_version="v1beta",
        path="/",
        body=body,
        received_at=0.0,
    )


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "parts": [{"text": text}]}


def test_an_agent_without_tools_gets_a_text_that_says_it_is_the_stub_and_echoes_the_task() -> None:
    reply = offline_reply(_request([_user("Summarise the quarterly report")]))
    assert reply.calls == ()
    assert reply.text is not None
    assert reply.text.startswith(NOTICE)
    assert "Task: Summarise the quarterly report" in reply.text


def test_a_task_naming_a_tool_gets_one_call_with_the_required_arguments_of_its_schema() -> None:
    task = "Please use lookup_docs to find the install guide"
    declarations = [
        {"name": "other_tool", "parametersJsonSchema": {"type": "object"}},
        {"name": "lookup_docs", "parametersJsonSchema": LOOKUP_SCHEMA},
    ]
    reply = offline_reply(_request([_user(task)], declarations))
    assert reply.text is None
    assert reply.calls == (
        Call(
            "lookup_docs",
            {
                "query": task,
                "limit": 3,
                "mode": "fast",
                "filters": {"lang": "Pl"},
                "tags": [task],
                "exact": False,
            },
        ),
    )


def test_gemini_style_schemas_with_upper_case_types_are_read_too() -> None:
    declaration = {
        "name": "get_entity",
        "parameters": {
            "type": "OBJECT",
            "properties": {"id": {"type": "STRING"}, "depth": {"type": "INTEGER"}},
            "required": ["id", "depth"],
        },
    }
    reply = offline_reply(_request([_user("call GET_ENTITY now")], [declaration]))
    assert reply.calls == (Call("get_entity", {"id": "call GET_ENTITY now", "depth": 1}),)


def test_after_the_tool_answers_the_final_text_includes_its_result() -> None:
    contents = [
        _user("use lookup_docs please"),
        {"role": "model", "parts": [{"functionCall": {"name": "lookup_docs", "args": {}}}]},
        {
            "role": "user",
            "parts": [
                {"functionResponse": {"name": "lookup_docs", "response": {"title": "Install"}}}
            ],
        },
    ]
    declarations = [{"name": "lookup_docs", "parametersJsonSchema": LOOKUP_SCHEMA}]
    reply = offline_reply(_request(contents, declarations))
    assert reply.calls == ()
    assert reply.text is not None
    assert reply.text.startswith(NOTICE)
    assert "Task: use lookup_docs please" in reply.text
    assert 'Tool lookup_docs returned: {"title": "Install"}' in reply.text


@pytest.mark.parametrize(
    "task",
    ["find the install guide", "lookup_docsy is not the tool", "see my.lookup_docs file"],
)
def test_a_task_that_does_not_name_a_tool_as_a_word_gets_text(task: str) -> None:
    declarations = [{"name": "lookup_docs", "parametersJsonSchema": LOOKUP_SCHEMA}]
    reply = offline_reply(_request([_user(task)], declarations))
    assert reply.calls == ()
    assert reply.text is not None
    assert f"Task: {task}" in reply.text


def test_a_long_task_is_cut_in_the_echo() -> None:
    reply = offline_reply(_request([_user("x" * 5000)]))
    assert reply.text is not None
    assert len(reply.text) < 700


def test_arguments_for_an_object_without_required_fields_are_empty() -> None:
    assert arguments_for({"type": "object", "properties": {"a": {"type": "string"}}}, "t") == {}


async def test_the_fallback_answers_only_what_no_script_nor_default_matches() -> None:
    book = ScriptBook(fallback=offline_script())
    book.add(Script(name="writer", match_system="writer", replies=[Reply(text="scripted")]))
    writer = _request([_user("write")])
    writer.body["systemInstruction"] = {"parts": [{"text": "You are a writer"}]}
    assert (await book.next_reply(writer))[1].text == "scripted"

    script, reply = await book.next_reply(_request([_user("anything")]))
    assert script.name == OFFLINE_SCRIPT_NAME
    assert reply.text is not None
    assert reply.text.startswith(NOTICE)

    book.add(Script(name="default", replies=[Reply(text="the default")]))
    assert (await book.next_reply(_request([_user("anything")])))[1].text == "the default"

    book.clear()  # forgets scripts, keeps the fallback
    assert [s.name for s in book.scripts()] == [OFFLINE_SCRIPT_NAME]
    assert (await book.next_reply(_request([_user("again")])))[0].name == OFFLINE_SCRIPT_NAME
    assert book.used(OFFLINE_SCRIPT_NAME) == 1


async def test_without_a_fallback_an_unmatched_request_still_fails_loudly() -> None:
    with pytest.raises(ScriptExhausted, match="no script matches"):
        await ScriptBook().next_reply(_request([_user("anything")]))


def test_a_call_asking_for_json_gets_an_object_that_fits_its_schema() -> None:
    """An agent with an output_schema completes offline: the answer validates."""
    import jsonschema

    schema = {
        "type": "object",
        "properties": {
            "title": {"type": "string"},
            "score": {"type": "integer", "minimum": 0, "maximum": 10},
        },
        "required": ["title", "score"],
    }
    request = _request([_user("Rate WebAssembly for servers.")])
    request.body["generationConfig"] = {
        "responseMimeType": "application/json",
        "responseJsonSchema": schema,
    }
    reply = offline_reply(request)
    answer = json.loads(reply.text or "")
    jsonschema.validate(answer, schema)
    assert answer == {"title": "Rate WebAssembly for servers.", "score": 0}
