"""``types.Content`` <-> JSON, exactly, for persisting conversations.

The executor stores each message as the JSON these return and rebuilds the conversation
from it; ``content_from_json(content_to_json(c)) == c`` for every content the model or the
executor produces (bytes such as thought signatures travel as base64).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from google.genai import types


def content_to_json(content: types.Content) -> dict[str, Any]:
    """The JSON form of one content (snake_case field names, ``None`` fields left out)."""
    return content.model_dump(mode="json", exclude_none=True)


def content_from_json(data: dict[str, Any]) -> types.Content:
    """Rebuilds a content from :func:`content_to_json` output (camelCase also accepted)."""
    return types.Content.model_validate(data)


def contents_to_json(contents: Iterable[types.Content]) -> list[dict[str, Any]]:
    return [content_to_json(content) for content in contents]


def contents_from_json(data: Iterable[dict[str, Any]]) -> list[types.Content]:
    return [content_from_json(item) for item in data]
