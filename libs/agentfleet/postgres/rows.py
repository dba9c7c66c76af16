"""Dataclasses from database rows: one rule for every repository's row mapper.

A repository selects columns named like its dataclass's fields; ``from_row`` fills the fields
by name and takes the few that need converting (JSON documents, arrays to tuples) as keywords.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

__all__ = ["from_row"]

T = TypeVar("T")


def from_row(cls: type[T], row: Mapping[str, Any], /, prefix: str = "", **converted: Any) -> T:
    """``cls`` built from the columns of ``row`` named like its init fields (after ``prefix``).

    Keywords in ``converted`` win over the row; a field with a default may be missing from the
    row, a field without one may not (KeyError names it, so a changed column list fails loudly).
    """
    values: dict[str, Any] = {}
    keys = set(row.keys())
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        if not field.init:
            continue
        name = field.name
        if name in converted:
            values[name] = converted[name]
        elif prefix + name in keys:
            values[name] = row[prefix + name]
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise KeyError(f"row has no column {prefix + name!r} for {cls.__name__}.{name}")
    return cls(**values)
