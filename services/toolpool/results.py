"""Results for the model: bounded in size, never silently cut."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

MAX_RESULT_BYTES = 64 * 1024
MAX_ARGUMENT_BYTES = 256 * 1024


@dataclass(frozen=True, kw_only=True, slots=True)
class BoundedResult:
    result: dict[str, Any]
    truncated: bool
    size_bytes: int
    """Size of the JSON before truncation."""


def bound_result(
    result: dict[str, Any], *, max_bytes: int = MAX_RESULT_BYTES, sent_size: int | None = None
) -> BoundedResult:
    """The result, or a preview of it with a marker telling the model it was cut.

    ``sent_size``: the result is the start of one this large, cut already (an MCP error
    result is redacted only as far as this preview can show it); it is reported as cut."""
    encoded = json.dumps(result, ensure_ascii=False, separators=(",", ":"), default=str)
    size = len(encoded.encode())
    if size <= max_bytes and sent_size is None:
        return BoundedResult(result=result, truncated=False, size_bytes=size)
    size = max(size, sent_size or 0)
    budget = max_bytes - 512
    while True:
        preview = encoded.encode()[:budget].decode(errors="ignore")
        marked = {
            "truncated": True,
            "note": (
                f"[result truncated: {size} bytes, limit {max_bytes}; the preview below is "
                "the start of the JSON result]"
            ),
            "preview": preview,
        }
        # Escaping can make the preview longer than its budget; shrink until it fits.
        if json_size(marked) <= max_bytes or budget <= 0:
            break
        budget = budget * max_bytes // json_size(marked) - 64
    return BoundedResult(
        result=marked,
        truncated=True,
        size_bytes=size,
    )


def json_size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str).encode())
