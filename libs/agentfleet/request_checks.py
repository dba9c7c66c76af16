"""Request checks every RPC gets in the interceptor, whatever its service.

Fields no service can store or convert are refused once, here, with INVALID_ARGUMENT naming
the field: strings with NUL characters, non-finite numbers and out-of-range Durations and
Timestamps.

The walk's cost is the caller's to choose: a request may be 16 MiB (the server's message
limit), 4 million packed enums or 1.5 million list values, and visiting them took 4.6-4.8 s
on the loop every project's calls share, before any service looked at the request. So a
request holds at most :data:`MAX_REQUEST_VALUES` values (fields, list items, map entries,
counted as the walk goes, which stops there), and a request bigger than
:data:`OFF_LOOP_BYTES` is walked in a thread: the loop keeps running (the interpreter hands
it the GIL every few milliseconds) and the walk is bounded, so no process pool is needed.
Requests with many map entries are refused before they are parsed
(:mod:`agentfleet.rpc.wire_budget`).
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import Any

from agentfleet.errors import FieldViolation

MAX_REQUEST_VALUES = 250_000
"""Values one request may hold: a 10,000-task graph (the graph cap) with a few properties per
task holds ~100,000."""
OFF_LOOP_BYTES = 256 * 1024
"""Requests bigger than this are walked off the loop (smaller ones take under ~20 ms)."""

# The ranges google.protobuf.Duration and Timestamp document as valid.
_MAX_DURATION_S = 315_576_000_000
_MIN_TIMESTAMP_S = -62_135_596_800  # 0001-01-01T00:00:00Z
_MAX_TIMESTAMP_S = 253_402_300_799  # 9999-12-31T23:59:59Z


@dataclass(slots=True)
class _Budget:
    left: int

    def spend(self, values: int) -> bool:
        """Takes ``values`` from the budget; False once it is spent."""
        self.left -= values
        return self.left >= 0


async def checked_request(message: Any) -> list[FieldViolation]:
    """:func:`request_violations`, walked in a thread when ``message`` is big."""
    if message.ByteSize() <= OFF_LOOP_BYTES:
        return request_violations(message)
    return await asyncio.to_thread(request_violations, message)


def request_violations(
    message: Any, path: str = "", budget: _Budget | None = None
) -> list[FieldViolation]:
    """Fields no service can store or convert, wherever they are in a request: strings with
    NUL characters (PostgreSQL text and jsonb refuse them), NaN and infinite numbers (JSON has
    none: json_format.MessageToDict raises on them in a Struct, and json.dumps writes a NaN
    that jsonb refuses) and out-of-range Durations and Timestamps (converting them
    overflows); and a request of more than :data:`MAX_REQUEST_VALUES` values, named at the
    field where it passes them. Checked once here for every RPC."""
    if budget is None:
        budget = _Budget(MAX_REQUEST_VALUES)
    name = message.DESCRIPTOR.full_name
    if name == "google.protobuf.Duration":
        seconds, nanos = message.seconds, message.nanos
        if (
            abs(seconds) > _MAX_DURATION_S
            or abs(nanos) > 999_999_999
            or (seconds > 0 > nanos or seconds < 0 < nanos)
        ):
            return [FieldViolation(path, "is not a valid Duration")]
        return []
    if name == "google.protobuf.Timestamp":
        if not _MIN_TIMESTAMP_S <= message.seconds <= _MAX_TIMESTAMP_S or not (
            0 <= message.nanos <= 999_999_999
        ):
            return [FieldViolation(path, "is not a valid Timestamp (years 1 to 9999)")]
        return []
    out: list[FieldViolation] = []
    for field_descriptor, value in message.ListFields():
        where = f"{path}.{field_descriptor.name}" if path else field_descriptor.name
        if not budget.spend(len(value) if field_descriptor.is_repeated else 1):
            return [_too_many(where)]
        if (
            field_descriptor.message_type is not None
            and field_descriptor.message_type.GetOptions().map_entry
        ):
            value_field = field_descriptor.message_type.fields_by_name["value"]
            for key, item in value.items():
                item_path = f"{where}[{key!r}]"
                if isinstance(key, str) and "\x00" in key:
                    out.append(FieldViolation(item_path, "keys must not contain NUL characters"))
                out += _value_violations(value_field, item, item_path, budget)
                if budget.left < 0:
                    break
        elif field_descriptor.is_repeated:
            for index, item in enumerate(value):
                out += _value_violations(field_descriptor, item, f"{where}[{index}]", budget)
                if budget.left < 0:
                    break
        else:
            out += _value_violations(field_descriptor, value, where, budget)
        if budget.left < 0:
            return [v for v in out if v.description.startswith(_TOO_MANY)][:1]
        if len(out) >= 10:
            break
    return out


_TOO_MANY = "the request holds more than"


def _too_many(where: str) -> FieldViolation:
    return FieldViolation(
        where,
        f"{_TOO_MANY} {MAX_REQUEST_VALUES:,} values (fields, list items, map entries) "
        "by here; send fewer per call",
    )


def _value_violations(
    field_descriptor: Any, value: Any, path: str, budget: _Budget
) -> list[FieldViolation]:
    if field_descriptor.message_type is not None:
        return request_violations(value, path, budget)
    if isinstance(value, str) and "\x00" in value:
        return [FieldViolation(path, "must not contain NUL characters")]
    # Every float and double field: Struct/Value number_value, ModelConfig.temperature.
    if isinstance(value, float) and not math.isfinite(value):
        return [FieldViolation(path, "must be a finite number")]
    return []
