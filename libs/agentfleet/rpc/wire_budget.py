"""How many entries a request's bytes hold, counted before protobuf parses them.

Parsing a message with a big map is far from linear in upb, the protobuf runtime the services
use (protocolbuffers/upb#1335): 400,000 ``labels`` (7 MB) took 4 s to parse, 1.2 million
(15 MB, under the 16 MiB message limit) 40 s, and the Struct of a manifest, a task's
properties or a tool call's arguments is a map too. gRPC parses each request on the
service's event loop as it arrives, before the caller is authenticated, so one such request
from anyone who can connect stood every project's calls still that long. Nothing can be done
inside the parse, so the bytes of a request bigger than :data:`SCAN_FROM_BYTES` are walked
first in their wire format (no values decoded: the tags and lengths only, following the
request's descriptor into the messages that can hold a map) and a request holding more than
:data:`agentfleet.request_checks.MAX_REQUEST_VALUES` fields (in the messages it enters: map
entries, list items, their fields) is refused unparsed; what it holds would be refused after
parsing anyway (that walk counts at least as many). The count reads at most that many fields,
0.3-0.75 s in the worst case; smaller requests cannot hold enough to matter.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from agentfleet.request_checks import MAX_REQUEST_VALUES

SCAN_FROM_BYTES = 1024 * 1024
"""Requests at least this big are counted before they are parsed (1 MiB of map entries
parses in ~0.15 ms per thousand)."""


class TooManyEntries(ValueError):
    """The request holds more values than a request may."""


def check_entries(data: bytes, descriptor: Any) -> None:
    """Raises :class:`TooManyEntries` when ``data``, a serialized ``descriptor`` message,
    holds more than MAX_REQUEST_VALUES fields in the messages that can hold a map (a message
    that cannot is one field); reads nothing more once it has counted that many. Bytes that
    are not valid wire format are left to the parser to refuse."""
    if len(data) < SCAN_FROM_BYTES or not _holds_maps(descriptor):
        return
    budget = [MAX_REQUEST_VALUES]
    _count(bytes(data), 0, len(data), descriptor, budget)


def _count(data: bytes, pos: int, end: int, descriptor: Any, budget: list[int]) -> None:
    inner = _message_fields(descriptor)
    while pos < end:
        budget[0] -= 1  # every field read counts, so no kind of field is read unbounded
        if budget[0] < 0:
            raise TooManyEntries(_TOO_MANY)
        tag = data[pos]  # one byte: the fields of these messages are numbered below 16
        pos += 1
        if tag >= 0x80:
            tag, pos = _varint(data, pos - 1)
            if tag < 0:
                return  # not wire format: the parser refuses it
        wire_type = tag & 7
        if wire_type == 2:
            length = data[pos] if pos < end else 0
            pos += 1
            if length >= 0x80:
                length, pos = _varint(data, pos - 1)
                if length < 0:
                    return
            message = inner.get(tag >> 3)
            if message is not None and message is not _LEAF:
                _count(data, pos, min(pos + length, end), message, budget)
            pos += length
        elif wire_type == 0:
            _, pos = _varint(data, pos)
        elif wire_type == 1:
            pos += 8
        elif wire_type == 5:
            pos += 4
        else:
            return  # groups or garbage: the parser decides


_TOO_MANY = (
    f"the request holds more than {MAX_REQUEST_VALUES:,} values (fields, list items, map "
    "entries); send fewer per call"
)
_LEAF = object()
"""A message field counted but not entered: nothing in it can hold a map."""


@cache
def _message_fields(descriptor: Any) -> dict[int, Any]:
    """Per field number, the message type to count and enter (or :data:`_LEAF`), for the
    message fields that are map entries or can hold one."""
    found: dict[int, Any] = {}
    for field in descriptor.fields:
        message = field.message_type
        if message is None or not _holds_maps(message):
            continue
        entered = message.GetOptions().map_entry and not any(
            f.message_type is not None and _holds_maps(f.message_type) for f in message.fields
        )
        found[field.number] = _LEAF if entered else message
    return found


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it; -1 for one longer than the 10 bytes
    a varint may take (or cut off), so garbage costs no more than a varint."""
    value = shift = 0
    for index in range(pos, min(pos + 10, len(data))):
        byte = data[index]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, index + 1
        shift += 7
    return -1, len(data)


@cache
def _holds_maps(descriptor: Any) -> bool:
    """Whether a message of this type can hold a map, however deep (Struct can)."""
    return _reaches_map(descriptor, frozenset())


def _reaches_map(descriptor: Any, seen: frozenset[str]) -> bool:
    if descriptor.GetOptions().map_entry:
        return True
    seen = seen | {descriptor.full_name}
    return any(
        field.message_type is not None
        and field.message_type.full_name not in seen
        and _reaches_map(field.message_type, seen)
        for field in descriptor.fields
    )
