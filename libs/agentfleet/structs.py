"""The one place a ``google.protobuf.Struct`` becomes a dict and back.

A Struct carries every number as a double, so ``json_format.MessageToDict`` returns a
model's ``{"limit": 5}`` as ``{"limit": 5.0}``: stored as ``5.0`` in the graph, refused by
an integer setting (``config.thread.max_turns``), and a ``TypeError`` in ``rows[:limit]``.
JSON itself has one number type, and every sender we meet (Gemini's function calls, a JSON
manifest, a structured answer) meant a whole number when it wrote one. So every Struct read
here turns a whole double back into an ``int``, and every service reads Structs through
:func:`struct_dict` (and messages holding them through :func:`message_dict`), never
``MessageToDict`` directly.

A double is an exact integer only up to 2**53; beyond that it stays a float (JSON readers
in other languages read such a number as a double anyway).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from google.protobuf import json_format, struct_pb2
from google.protobuf.message import Message

__all__ = ["EXACT_INTEGER", "message_dict", "struct_dict", "to_struct", "whole_numbers"]

EXACT_INTEGER = 2**53
"""Doubles of at most this magnitude that are whole are exact integers."""


def whole_numbers(value: Any) -> Any:
    """``value`` with every whole float (of at most :data:`EXACT_INTEGER`) an ``int``, in
    nested dicts and lists too; anything else unchanged."""
    if isinstance(value, float):
        if math.isfinite(value) and value.is_integer() and abs(value) <= EXACT_INTEGER:
            return int(value)
        return value
    if isinstance(value, dict):
        return {k: whole_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [whole_numbers(v) for v in value]
    return value


def struct_dict(struct: struct_pb2.Struct) -> dict[str, Any]:
    """``struct`` as a dict, whole numbers as ``int``."""
    result: dict[str, Any] = whole_numbers(json_format.MessageToDict(struct))
    return result


def message_dict(message: Message, **options: Any) -> dict[str, Any]:
    """``json_format.MessageToDict(message, **options)`` with every Struct's whole numbers
    as ``int`` (a double field's whole value too, which JSON reads the same)."""
    result: dict[str, Any] = whole_numbers(json_format.MessageToDict(message, **options))
    return result


def to_struct(value: Mapping[str, Any]) -> struct_pb2.Struct:
    """``value`` as a Struct (``ValueError``/``TypeError`` when it is not JSON)."""
    struct = struct_pb2.Struct()
    struct.update(value)
    return struct
