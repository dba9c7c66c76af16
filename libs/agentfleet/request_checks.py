"""Request checks every RPC gets in the interceptor, whatever its service.

Fields no service can store or convert are refused once, here, with INVALID_ARGUMENT naming
the field: strings with NUL characters, non-finite numbers and out-of-range Durations and
Timestamps.
"""

from __future__ import annotations

import math
from typing import Any

from agentfleet.errors import FieldViolation

# The ranges google.protobuf.Duration and Timestamp document as valid.
_MAX_DURATION_S = 315_576_000_000
_MIN_TIMESTAMP_S = -62_135_596_800  # 0001-01-01T00:00:00Z
_MAX_TIMESTAMP_S = 253_402_300_799  # 9999-12-31T23:59:59Z


def request_violations(message: Any, path: str = "") -> list[FieldViolation]:
    """Fields no service can store or convert, wherever they are in a request: strings with
    NUL characters (PostgreSQL text and jsonb refuse them), NaN and infinite numbers (JSON has
    none: json_format.MessageToDict raises on them in a Struct, and json.dumps writes a NaN
    that jsonb refuses) and out-of-range Durations and Timestamps (converting them
    overflows). Checked once here for every RPC."""
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
        if (
            field_descriptor.message_type is not None
            and field_descriptor.message_type.GetOptions().map_entry
        ):
            value_field = field_descriptor.message_type.fields_by_name["value"]
            for key, item in value.items():
                item_path = f"{where}[{key!r}]"
                if isinstance(key, str) and "\x00" in key:
                    out.append(FieldViolation(item_path, "keys must not contain NUL characters"))
                out += _value_violations(value_field, item, item_path)
        elif field_descriptor.is_repeated:
            for index, item in enumerate(value):
                out += _value_violations(field_descriptor, item, f"{where}[{index}]")
        else:
            out += _value_violations(field_descriptor, value, where)
        if len(out) >= 10:
            break
    return out


def _value_violations(field_descriptor: Any, value: Any, path: str) -> list[FieldViolation]:
    if field_descriptor.message_type is not None:
        return request_violations(value, path)
    if isinstance(value, str) and "\x00" in value:
        return [FieldViolation(path, "must not contain NUL characters")]
    # Every float and double field: Struct/Value number_value, ModelConfig.temperature.
    if isinstance(value, float) and not math.isfinite(value):
        return [FieldViolation(path, "must be a finite number")]
    return []
