"""MCP tool results mapped to the JSON object the model reads.

Shape::

    {"content": [block, ...], "structured_content": <any JSON>}   # the latter when sent

Blocks: ``{"type": "text", "text"}``; ``{"type": "image"|"audio", "mime_type", "data",
"size_bytes"}`` (``data`` base64, replaced by ``null`` plus a ``note`` when larger than the
inline limit, never silently); ``{"type": "resource", "uri", "mime_type", "text"}`` or with
``data`` for a blob; ``{"type": "resource_link", "uri", "name", "title", "description",
"mime_type", "size_bytes"}``. Unset optional fields are left out.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types

from services.toolpool.results import MAX_RESULT_BYTES, json_size

from .redaction import Redactor, redact_structure

DEFAULT_MAX_INLINE_BYTES = 256 * 1024


def map_call_result(
    result: types.CallToolResult, *, max_inline_bytes: int = DEFAULT_MAX_INLINE_BYTES
) -> dict[str, Any]:
    """The JSON object for ``result`` (``is_error`` is carried separately by the caller)."""
    mapped: dict[str, Any] = {
        "content": [map_block(block, max_inline_bytes=max_inline_bytes) for block in result.content]
    }
    if result.structured_content is not None:
        mapped["structured_content"] = result.structured_content
    return mapped


def redacted_error(
    mapped: dict[str, Any], redact: Redactor
) -> tuple[dict[str, Any], str, int | None]:
    """An error result (``mapped``) as the model may read it: redacted only as far as the
    bounded result can show it (:data:`MAX_RESULT_BYTES`, so a server's megabytes cost no
    more), its message (its text blocks, cut like any message), and the size of the JSON
    the server sent when that was cut (else ``None``)."""
    size = json_size(mapped)
    shown = redact_structure(mapped, redact, MAX_RESULT_BYTES)
    blocks = shown.get("content")
    # Cut, a block may lack its text or be the note that says so.
    texts = [
        b["text"]
        for b in (blocks if isinstance(blocks, list) else [])
        if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
    ]
    message = redact.bounded("\n".join(texts) or "the tool reported an error")
    return shown, message, size if size > MAX_RESULT_BYTES else None


def map_block(block: Any, *, max_inline_bytes: int = DEFAULT_MAX_INLINE_BYTES) -> dict[str, Any]:
    """One content block as JSON; an unknown block keeps its type and its fields."""
    match block:
        case types.TextContent():
            return {"type": "text", "text": block.text}
        case types.ImageContent() | types.AudioContent():
            out = {"type": block.type, "mime_type": block.mime_type}
            return out | _binary(block.data, max_inline_bytes)
        case types.EmbeddedResource():
            resource = block.resource
            out = _compact(
                {"type": "resource", "uri": resource.uri, "mime_type": resource.mime_type}
            )
            if isinstance(resource, types.TextResourceContents):
                return out | {"text": resource.text}
            return out | _binary(resource.blob, max_inline_bytes)
        case types.ResourceLink():
            return _compact(
                {
                    "type": "resource_link",
                    "uri": block.uri,
                    "name": block.name,
                    "title": block.title,
                    "description": block.description,
                    "mime_type": block.mime_type,
                    "size_bytes": block.size,
                }
            )
        case _:
            # A block type newer than this code: pass it on rather than drop it.
            dumped = block.model_dump(mode="json", exclude_none=True, by_alias=False)
            return dumped if isinstance(dumped, dict) else {"type": "unknown", "value": dumped}


def _binary(data: str, max_inline_bytes: int) -> dict[str, Any]:
    size = _decoded_size(data)
    if size <= max_inline_bytes:
        return {"data": data, "size_bytes": size}
    return {
        "data": None,
        "size_bytes": size,
        "note": f"binary data of {size} bytes omitted (inline limit {max_inline_bytes} bytes)",
    }


def _decoded_size(data: str) -> int:
    """Bytes encoded by base64 ``data`` (without decoding it)."""
    stripped = data.rstrip()
    return len(stripped) * 3 // 4 - (len(stripped) - len(stripped.rstrip("=")))


def _compact(fields: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}
