"""The idempotency key of a mutating RPC (AIP-155): one length limit for every service, and
one way to tell a repeat of a request from another request under the same key.

A server stores :func:`request_fingerprint` of what a request asked beside its
``request_id``; a later call with that ``request_id`` replays the first answer only when
its fingerprint is the same (:func:`check_same_request`), else it is refused, so a client
never gets an answer to a request it did not make and never loses a request silently.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from agentfleet.errors import FieldViolation, InvalidArgument

MAX_REQUEST_ID_CHARS = 128
"""Longest ``request_id`` a mutating RPC accepts."""

REUSED_REQUEST_ID = "was already used for a different request"
"""The refusal of a ``request_id`` repeated with other content."""


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


def request_fingerprint(meaningful: Any) -> str:
    """sha256 (hex) of the canonical JSON of what a request asks: its fields after
    validation and normalisation, without ``request_id`` itself and without options that
    change nothing stored (``validate_only``, streaming choices).

    Canonical means sorted keys and :func:`json.dumps`' default separators and ASCII
    escaping: DecideToolCall stored its digests in exactly this form before this helper
    existed, so they still match."""
    return hashlib.sha256(json.dumps(meaningful, sort_keys=True).encode()).hexdigest()


def check_same_request(stored: str | None, fingerprint: str | None) -> None:
    """Refuses a ``request_id`` repeated with a request whose fingerprint is not the stored
    one: :class:`InvalidArgument` naming ``request_id``, the code DecideToolCall always gave
    (the key is a field of the request and the refusal is a ``BadRequest`` field violation,
    AIP-193), so every mutating RPC answers this case the same way.

    A side without a fingerprint matches anything: rows stored before migration 0022 have
    none, and neither do the keys the services derive themselves (a child run's, found
    again by a recovered parent whose rebuilt parameters may differ in what it does not
    control). Those keep the replay they always had."""
    if stored is not None and fingerprint is not None and stored != fingerprint:
        raise InvalidArgument.for_field("request_id", REUSED_REQUEST_ID)
