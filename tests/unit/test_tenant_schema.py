"""The bounds of tenant and MCP server schemas (:mod:`agentfleet.bounded.tenant_schema`): what a
schema expands to, uniqueItems by hashing, and capped validation errors."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from agentfleet.bounded.schema_expansion import MAX_SCHEMA_EXPANSION, schema_expansion
from agentfleet.bounded.tenant_schema import (
    MAX_COUNTED_ERRORS,
    SchemaValidator,
    first_errors,
    json_key,
    schema_refusal,
    validator_class,
)


def doubling_defs(levels: int) -> dict[str, Any]:
    """``$defs`` each naming the next twice through allOf: 2^levels nodes, ~70 bytes each."""
    defs = {
        f"d{i}": {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}"}]}
        for i in range(levels)
    }
    defs[f"d{levels}"] = {"type": "string"}
    return {"type": "object", "$defs": defs, "properties": {"x": {"$ref": "#/$defs/d0"}}}


def test_every_ref_is_followed_and_counted_at_each_use() -> None:
    def expanded(i: int, levels: int) -> int:  # d_i: itself, two allOf members, theirs
        return 1 if i == levels else 1 + 2 * (1 + expanded(i + 1, levels))

    found = schema_expansion(doubling_defs(5))
    assert found.nodes == 1 + 1 + expanded(0, 5)  # the root, properties.x, then d0
    assert not found.recursive
    assert found.endless is None
    assert found.unresolved is None


def test_the_count_stops_just_past_the_limit() -> None:
    found = schema_expansion(doubling_defs(40), limit=1000)  # 2^40 nodes in full
    assert 1000 < found.nodes < 1100


def test_the_issues_schema_is_refused_and_an_honest_one_is_not() -> None:
    refusal = schema_refusal(doubling_defs(17))
    assert refusal is not None
    assert f"more than {MAX_SCHEMA_EXPANSION:,} schema nodes" in refusal
    assert schema_refusal(doubling_defs(8)) is None


def test_recursion_through_a_part_of_the_value_is_counted_once() -> None:
    tree = {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {"left": {"$ref": "#/$defs/node"}, "right": {"$ref": "#/$defs/node"}},
            }
        },
        "$ref": "#/$defs/node",
    }
    found = schema_expansion(tree)
    assert found.recursive
    assert found.endless is None
    assert found.nodes < 10
    assert schema_refusal(tree) is None


@pytest.mark.parametrize(
    "schema",
    [
        {"$ref": "#"},
        {"anyOf": [{"type": "string"}, {"$ref": "#"}]},
        {
            "$defs": {"a": {"allOf": [{"$ref": "#/$defs/b"}]}, "b": {"not": {"$ref": "#/$defs/a"}}},
            "$ref": "#/$defs/a",
        },
    ],
)
def test_a_ref_loop_in_place_is_endless(schema: dict[str, Any]) -> None:
    assert schema_expansion(schema).endless is not None
    assert "without end" in (schema_refusal(schema) or "")


def test_a_ref_that_resolves_nowhere_is_refused() -> None:
    schema = {"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}
    assert schema_expansion(schema).unresolved == "#/$defs/missing"
    assert "resolves to nothing" in (schema_refusal(schema) or "")


def test_a_ref_to_a_metaschema_resolves_without_the_network() -> None:
    found = schema_expansion({"$ref": "https://json-schema.org/draft/2020-12/schema"})
    assert found.unresolved is None
    assert found.recursive


def test_refs_inside_a_subresource_resolve_against_its_id() -> None:
    schema = {
        "$defs": {
            "inner": {
                "$id": "https://example.com/inner",
                "$defs": {"leaf": {"type": "string"}},
                "properties": {"a": {"$ref": "#/$defs/leaf"}},
            }
        },
        "$ref": "#/$defs/inner",
    }
    found = schema_expansion(schema)
    assert found.unresolved is None
    assert found.nodes == 4  # the root, inner, properties.a, leaf


SAMPLES: list[Any] = [
    0,
    1,
    1.0,
    -0.0,
    2.5,
    True,
    False,
    None,
    "",
    "1",
    "a",
    [],
    [1],
    [1.0],
    [True],
    [[1, True]],
    [[1.0, True]],
    {},
    {"a": 1},
    {"a": 1.0},
    {"a": True},
    {"a": 1, "b": [False]},
    {"b": [False], "a": 1},
    {"a": {"b": 0}},
    {"a": {"b": False}},
]


@pytest.mark.parametrize(("one", "two"), list(itertools.combinations_with_replacement(SAMPLES, 2)))
def test_unique_items_agrees_with_jsonschema(one: Any, two: Any) -> None:
    schema = {"uniqueItems": True}
    ours = SchemaValidator(schema).is_valid([one, two])
    theirs = Draft202012Validator(schema).is_valid([one, two])
    assert ours == theirs, (one, two)
    assert (json_key(one) == json_key(two)) == (not theirs)


def test_unique_items_is_linear() -> None:
    items = [{"id": i, "tags": [str(i), i % 7 == 0]} for i in range(50_000)]
    assert SchemaValidator({"uniqueItems": True}).is_valid(items)
    assert not SchemaValidator({"uniqueItems": True}).is_valid(
        [*items, {"tags": ["3", False], "id": 3.0}]
    )


def test_every_draft_an_mcp_server_names_gets_the_hashed_unique_items() -> None:
    cls = validator_class({"$schema": "http://json-schema.org/draft-07/schema#"})
    assert cls.VALIDATORS["uniqueItems"] is SchemaValidator.VALIDATORS["uniqueItems"]
    assert not cls({"uniqueItems": True}).is_valid([{"a": 1}, {"a": 1.0}])


def test_errors_are_capped_and_the_rest_counted() -> None:
    validator = SchemaValidator({"type": "array", "items": {"type": "string", "minLength": 1}})
    found = first_errors(validator.iter_errors([""] * 150), limit=20)
    assert len(found.errors) == 20
    assert found.more == 130
    assert found.more_text == "and 130 more"


def test_counting_the_rest_stops() -> None:
    validator = SchemaValidator({"type": "array", "items": {"type": "string"}})
    found = first_errors(validator.iter_errors([0] * (MAX_COUNTED_ERRORS + 500)), limit=5)
    assert found.more == MAX_COUNTED_ERRORS + 1
    assert found.more_text == f"and more than {MAX_COUNTED_ERRORS:,} more"
    assert first_errors(validator.iter_errors(["ok"])).more_text == ""
