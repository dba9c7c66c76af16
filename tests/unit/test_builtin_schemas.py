"""Built-in tool schemas: valid JSON Schema, a Gemini-accepted subset, precise validation."""

from __future__ import annotations

import re
from typing import Any

import pytest
from google.genai import types
from jsonschema import Draft202012Validator

from services.toolpool.builtin import (
    BUILTIN_TOOLS,
    ToolError,
    gemini_parameters,
    validate_arguments,
)

EXPECTED = {
    "create_entity",
    "get_entity",
    "update_entity",
    "delete_entity",
    "list_entities",
    "create_relationship",
    "delete_relationship",
    "get_related",
    "graph_traverse",
    "search_fts",
    "search_hybrid",
    "create_subtasks",
    "open_discussion",
    "join_discussion",
}
GEMINI_KEYWORDS = {"type", "properties", "required", "items", "enum", "description"}
GEMINI_TYPES = {"object", "array", "string", "integer", "number", "boolean"}


def test_every_expected_tool_is_registered() -> None:
    assert set(BUILTIN_TOOLS) == EXPECTED
    assert all(name == tool.name for name, tool in BUILTIN_TOOLS.items())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_schema_is_valid_json_schema(name: str) -> None:
    tool = BUILTIN_TOOLS[name]
    Draft202012Validator.check_schema(tool.schema)
    Draft202012Validator.check_schema(tool.parameters)
    assert tool.schema["type"] == "object"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_parameters_are_the_gemini_subset(name: str) -> None:
    tool = BUILTIN_TOOLS[name]
    assert re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_.-]{0,63}", tool.name)
    assert tool.description.strip()
    _check_gemini_node(tool.parameters, "parameters")
    # The SDK's own model of a declaration forbids unknown keys: it must accept ours.
    declaration = types.FunctionDeclaration.model_validate(
        {"name": tool.name, "description": tool.description, "parameters": tool.parameters}
    )
    assert declaration.parameters is not None


def _check_gemini_node(node: dict[str, Any], path: str) -> None:
    assert set(node) <= GEMINI_KEYWORDS, (path, set(node) - GEMINI_KEYWORDS)
    assert node.get("type") in GEMINI_TYPES, path
    if node["type"] == "object":
        # Gemini rejects an OBJECT without properties ("should be non-empty").
        assert node.get("properties"), path
        assert set(node.get("required", [])) <= set(node["properties"]), path
        for key, sub in node["properties"].items():
            _check_gemini_node(sub, f"{path}.{key}")
    else:
        assert not {"properties", "required"} & set(node), path
    if node["type"] == "array":
        _check_gemini_node(node["items"], f"{path}[]")
    if "enum" in node:
        assert node["type"] == "string"
        assert all(isinstance(v, str) for v in node["enum"])
    if path != "parameters":
        assert node.get("description") or path.endswith("[]"), f"{path} has no description"


def test_gemini_parameters_keeps_property_names_that_look_like_keywords() -> None:
    schema = {
        "type": "object",
        "properties": {"pattern": {"type": "string", "maxLength": 3}},
        "additionalProperties": False,
    }
    assert gemini_parameters(schema) == {
        "type": "object",
        "properties": {"pattern": {"type": "string"}},
    }


def _error(name: str, args: object) -> str:
    with pytest.raises(ToolError) as caught:
        validate_arguments(BUILTIN_TOOLS[name], args)
    return caught.value.message


def test_missing_required_field_is_named() -> None:
    assert _error("get_entity", {}) == "invalid arguments: id: is required"


def test_unknown_argument_is_named() -> None:
    assert "colour: unknown argument" in _error("get_entity", {"id": "x", "colour": "red"})


def test_wrong_type_is_named() -> None:
    message = _error("graph_traverse", {"start_id": "x", "max_depth": "deep"})
    assert "max_depth: must be an integer, got string" in message


def test_out_of_range_is_named() -> None:
    assert "max_depth: must be at most 5" in _error(
        "graph_traverse", {"start_id": "x", "max_depth": 6}
    )


def test_nested_path_is_named() -> None:
    message = _error(
        "create_subtasks",
        {"tasks": [{"key": "a", "title": "A"}, {"key": "b bad", "extra": 1}]},
    )
    assert "tasks[1].title: is required" in message
    assert "tasks[1].extra: unknown argument" in message
    assert "tasks[1].key: must match" in message


def test_enum_is_named() -> None:
    assert "direction: must be one of out, in, both" in _error(
        "get_related", {"id": "x", "direction": "sideways"}
    )


def test_huge_values_are_not_echoed() -> None:
    message = _error("search_fts", {"query": "q" * 100_000})
    assert "query: longer than 1000 characters" in message
    assert len(message) < 200


def test_arguments_must_be_an_object() -> None:
    assert _error("get_entity", ["x"]) == "invalid arguments: must be an object, got array"


def test_stray_project_id_is_ignored() -> None:
    args = validate_arguments(BUILTIN_TOOLS["get_entity"], {"id": "x", "project_id": "evil"})
    assert args == {"id": "x"}


def test_property_bags_accept_any_keys() -> None:
    args = {"type": "Doc", "properties": {"title": "t", "pages": 3, "nested": {"a": [1]}}}
    assert validate_arguments(BUILTIN_TOOLS["create_entity"], args) == args


def test_a_flood_of_bad_arguments_is_described_by_its_first_errors() -> None:
    from services.toolpool.builtin.base import BuiltinTool, ToolError, validate_arguments

    async def handler(context: Any, args: dict[str, Any]) -> dict[str, Any]:
        return {}

    tool = BuiltinTool(
        name="tagger",
        description="Tags.",
        schema={
            "type": "object",
            "properties": {"tags": {"type": "array", "items": {"type": "string"}}},
        },
        handler=handler,
    )
    with pytest.raises(ToolError) as refused:
        validate_arguments(tool, {"tags": list(range(150_000))})
    message = refused.value.message
    assert message.count("must be a string") == 5
    assert message.endswith("; and more than 10,000 more")
    with pytest.raises(ToolError) as few:
        validate_arguments(tool, {"tags": list(range(7))})
    assert few.value.message.endswith("; and 2 more")
