"""Small builders for the tools' argument schemas, so every schema stays inside the subset
Gemini accepts (after :func:`~services.toolpool.builtin.base.gemini_parameters`) and every
object rejects unknown keys unless it is a free-form property bag."""

from __future__ import annotations

from typing import Any

Schema = dict[str, Any]

MAX_NAME = 100
"""Longest type or relationship type name."""
MAX_TEXT = 10_000
"""Longest free-text argument (queries are shorter)."""


def string(description: str, *, max_length: int = MAX_NAME, pattern: str | None = None) -> Schema:
    schema: Schema = {
        "type": "string",
        "description": description,
        "minLength": 1,
        "maxLength": max_length,
    }
    if pattern is not None:
        schema["pattern"] = pattern
    return schema


def object_id(description: str) -> Schema:
    return string(description, max_length=64)


ENTITY_ID = object_id("Entity id.")


def integer(description: str, *, minimum: int, maximum: int) -> Schema:
    return {"type": "integer", "description": description, "minimum": minimum, "maximum": maximum}


def version(description: str) -> Schema:
    """An object's version: the database stores it as a 32-bit integer."""
    return integer(description, minimum=1, maximum=2**31 - 1)


def enum(description: str, values: list[str]) -> Schema:
    return {"type": "string", "description": description, "enum": values}


def array(description: str, items: Schema, *, max_items: int, min_items: int = 0) -> Schema:
    schema: Schema = {
        "type": "array",
        "description": description,
        "items": items,
        "maxItems": max_items,
    }
    if min_items:
        schema["minItems"] = min_items
    return schema


def obj(
    properties: dict[str, Schema], *, required: tuple[str, ...] = (), description: str = ""
) -> Schema:
    """A closed object: keys outside ``properties`` are rejected."""
    schema: Schema = {"type": "object", "properties": properties, "additionalProperties": False}
    if description:
        schema["description"] = description
    if required:
        schema["required"] = list(required)
    return schema


def property_bag(description: str) -> Schema:
    """Free-form object properties. Gemini rejects an object schema without properties, so
    the usual text keys are listed (they feed full-text search); any other key is accepted
    too, with any JSON value."""
    text = "Text; searchable."
    return {
        "type": "object",
        "description": description + " Any keys; title, name, summary, description and "
        "content are searched by search_fts and search_hybrid.",
        "properties": {
            "title": {"type": "string", "description": text},
            "name": {"type": "string", "description": text},
            "summary": {"type": "string", "description": text},
            "description": {"type": "string", "description": text},
            "content": {"type": "string", "description": text},
            "status": {"type": "string", "description": "Status, for types that have one."},
        },
        "maxProperties": 200,
    }


def limit(default: int, maximum: int) -> Schema:
    return integer(f"Most results to return (default {default}).", minimum=1, maximum=maximum)
