"""The schema pool (:mod:`agentfleet.bounded.schema_pool`): checks run in worker processes, a
runaway is killed at the time limit and its worker replaced, cheap checks stay inline."""

from __future__ import annotations

from typing import Any

import pytest

from agentfleet.bounded.schema_pool import SchemaCheckTimeout, SchemaPool, is_cheap

DOUBLING_PER_LEVEL = {
    "$defs": {
        "node": {
            "type": "object",
            "properties": {"x": {"allOf": [{"$ref": "#/$defs/node"}, {"$ref": "#/$defs/node"}]}},
        }
    },
    "$ref": "#/$defs/node",
}


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"x": value}
    return value


def test_only_what_the_bounds_prove_cheap_is_inline() -> None:
    small = {"type": "object", "properties": {"a": {"type": "string"}}}
    assert is_cheap(small, {"a": "b"})
    assert not is_cheap(small, {"a": "b" * 1_000_000})  # string length counts
    assert not is_cheap(DOUBLING_PER_LEVEL, nested(2))  # recursion: its cost is the value's


async def test_a_runaway_check_is_killed_and_the_next_one_is_served() -> None:
    pool = SchemaPool(workers=1, timeout_s=1.0)
    try:
        with pytest.raises(SchemaCheckTimeout, match="longer than 1 s"):
            await pool.check(DOUBLING_PER_LEVEL, nested(30))
        verdict = await pool.check(DOUBLING_PER_LEVEL, {"x": {"x": 1}})
        assert not verdict.ok
        assert verdict.problems[0].keyword == "type"
        assert verdict.problems[0].path == ("x", "x")
    finally:
        await pool.aclose()


async def test_errors_come_back_capped_with_a_count() -> None:
    pool = SchemaPool(workers=1)
    try:
        schema = {"type": "array", "uniqueItems": True, "items": {"type": "string"}}
        verdict = await pool.check(schema, list(range(5000)))
        assert len(verdict.problems) == 20
        assert verdict.more_text == "and 4,980 more"
        broken = await pool.check({"$ref": "#/$defs/missing"}, list(range(5000)))
        assert broken.schema_error is not None
        assert "resolves to nothing" in broken.schema_error
    finally:
        await pool.aclose()
