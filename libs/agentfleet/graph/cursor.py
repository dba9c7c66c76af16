"""Opaque keyset cursors for object lists: the last (created_at, id) plus a filter hash.

A cursor is only valid with the filters it was made for: reused with others it is
INVALID_ARGUMENT rather than a silently wrong page.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agentfleet.errors import InvalidArgument

__all__ = ["Position", "decode_cursor", "encode_cursor", "filter_digest"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Position:
    created_at: datetime
    id: uuid.UUID


def filter_digest(filters: Any) -> str:
    """A short hash of the filters (any JSON value), canonical so key order does not matter."""
    canonical = json.dumps(filters, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def encode_cursor(position: Position, digest: str) -> str:
    payload = {"t": position.created_at.isoformat(), "i": str(position.id), "f": digest}
    raw = json.dumps(payload, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, digest: str, *, field: str = "cursor") -> Position:
    """The position in ``cursor``; :class:`InvalidArgument` naming ``field`` if it is not one
    of ours or was made for other filters."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        payload = json.loads(raw)
        position = Position(
            created_at=datetime.fromisoformat(payload["t"]), id=uuid.UUID(payload["i"])
        )
        made_for = payload["f"]
    except (binascii.Error, ValueError, KeyError, TypeError) as exc:
        raise InvalidArgument.for_field(field, "not a cursor returned by this list") from exc
    if made_for != digest:
        raise InvalidArgument.for_field(field, "cursor was made for other filters")
    return position
