"""agentfleet.postgres.rows.from_row: the one row-to-dataclass rule of the repositories."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from agentfleet.postgres.rows import from_row


@dataclass
class Thing:
    id: str
    tags: tuple[str, ...]
    note: str = "none"
    extra: dict[str, str] = field(default_factory=dict)


def test_fields_by_name_with_conversions_winning() -> None:
    row = {"id": "a", "tags": ["x", "y"], "note": "n", "unrelated": 1}
    thing = from_row(Thing, row, tags=tuple(row["tags"]))
    assert thing == Thing(id="a", tags=("x", "y"), note="n")


def test_missing_optional_columns_take_defaults() -> None:
    assert from_row(Thing, {"id": "a", "tags": ()}) == Thing(id="a", tags=())


def test_prefix_selects_a_joined_tables_columns() -> None:
    row = {"id": "outer", "r_id": "inner", "r_tags": ("t",)}
    assert from_row(Thing, row, "r_") == Thing(id="inner", tags=("t",))


def test_a_missing_required_column_names_it() -> None:
    with pytest.raises(KeyError, match="tags"):
        from_row(Thing, {"id": "a"})
