"""Keyset pagination with opaque page tokens (AIP-158).

A token is the base64url of a small JSON document holding the keyset position of the last
row served and a hash of the filters it was issued for. Reusing a token with other filters,
or sending anything that is not a token, is INVALID_ARGUMENT — never INTERNAL.

The one page-token codec of the platform: the gRPC listings' ``page_token`` and the
knowledge graph's ``cursor`` alike.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from agentfleet.errors import InvalidArgument

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 500
_MAX_TOKEN_CHARS = 2048

Position = Sequence[str | int | float | bool | datetime | None]


def clamp_page_size(page_size: int, *, field: str = "page_size") -> int:
    """0 means the default (50); values above 500 are clamped; negatives are refused."""
    if page_size < 0:
        raise InvalidArgument.for_field(field, "must not be negative")
    if page_size == 0:
        return DEFAULT_PAGE_SIZE
    return min(page_size, MAX_PAGE_SIZE)


def filters_digest(filters: Mapping[str, Any]) -> str:
    canonical = json.dumps(filters, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def encode_page_token(position: Position, filters: Mapping[str, Any]) -> str:
    """The token that resumes a listing after ``position`` under the same ``filters``."""
    values = [{"dt": v.isoformat()} if isinstance(v, datetime) else v for v in position]
    document = json.dumps({"p": values, "f": filters_digest(filters)}, separators=(",", ":"))
    return base64.urlsafe_b64encode(document.encode()).decode().rstrip("=")


def decode_page_token(
    token: str, filters: Mapping[str, Any], *, kinds: Sequence[type], field: str = "page_token"
) -> list[Any] | None:
    """The keyset position in ``token``, one value of each of ``kinds`` (see
    :func:`_of_kind`); None for an empty token (the first page). Tokens are opaque but not
    signed, so a caller can write one: a value of another kind is INVALID_ARGUMENT here,
    never a failed query later."""
    if not token:
        return None
    if len(token) > _MAX_TOKEN_CHARS:
        raise not_a_page_token(field)
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        document = json.loads(raw)
        values = document["p"]
        digest = document["f"]
        if not isinstance(values, list):
            raise ValueError("not a list")
        # strict: a position of another length is a ValueError too.
        position = [_of_kind(_decode_value(v), k) for v, k in zip(values, kinds, strict=True)]
    except (binascii.Error, ValueError, KeyError, TypeError, RecursionError, OverflowError):
        # RecursionError: json.loads of a deeply nested document ("[[[[..."); OverflowError:
        # a date that leaves years 1-9999 in UTC. UnicodeDecodeError is a ValueError.
        raise not_a_page_token(field) from None
    if digest != filters_digest(filters):
        raise InvalidArgument.for_field(
            field, f"was issued for other filters; start again without a {field}"
        )
    return position


_INT32 = range(-(2**31), 2**31)


def _of_kind(value: Any, kind: type) -> Any:
    """``value`` as a position value of ``kind``: a ``datetime`` with its offset, in years
    1-9999 in UTC (a ``timestamptz``), a ``uuid.UUID`` (written as its text), an ``int`` of
    32 bits (every integer keyset is a PostgreSQL integer: message seq, task attempt) or a
    ``str`` PostgreSQL can hold as text (no NUL, no lone surrogate); ValueError (or
    OverflowError) for anything else."""
    if kind is uuid.UUID and isinstance(value, str):
        return uuid.UUID(value)
    if kind is int and type(value) is int and value in _INT32:
        return value
    if kind is datetime and isinstance(value, datetime) and value.tzinfo is not None:
        value.astimezone(UTC)  # OverflowError past year 1 or 9999
        return value
    if kind is str and isinstance(value, str) and "\x00" not in value:
        value.encode()  # UnicodeEncodeError (a ValueError) for a lone surrogate
        return value
    raise ValueError(f"not a {kind.__name__}")


def not_a_page_token(field: str = "page_token") -> InvalidArgument:
    """The refusal of a value in ``field`` that no listing issued (also for a decoded
    position whose values a caller finds of the wrong kind)."""
    return InvalidArgument.for_field(field, "is not a page token of this listing")


def _decode_value(value: Any) -> Any:
    if isinstance(value, dict):
        return datetime.fromisoformat(value["dt"])
    if value is None or isinstance(value, str | int | float | bool):
        return value
    raise ValueError("unexpected value")


def page_of(rows: Sequence[Any], page_size: int) -> tuple[Sequence[Any], bool]:
    """Splits ``page_size + 1`` fetched rows into the page and whether more follow."""
    return rows[:page_size], len(rows) > page_size
