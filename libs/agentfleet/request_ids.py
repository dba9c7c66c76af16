"""The idempotency key of a mutating RPC: one length limit for every service."""

from __future__ import annotations

from agentfleet.errors import FieldViolation, InvalidArgument

MAX_REQUEST_ID_CHARS = 128
"""Longest ``request_id`` a mutating RPC accepts."""


def request_id_violations(value: str, field: str = "request_id") -> list[FieldViolation]:
    """What is wrong with a ``request_id``: nothing, or that it is past the limit."""
    if len(value) > MAX_REQUEST_ID_CHARS:
        return [FieldViolation(field, f"is longer than {MAX_REQUEST_ID_CHARS} characters")]
    return []


def checked_request_id(value: str, field: str = "request_id") -> str:
    """``value`` when it fits the limit; :class:`InvalidArgument` naming ``field`` otherwise."""
    if violations := request_id_violations(value, field):
        raise InvalidArgument.for_fields(violations)
    return value
