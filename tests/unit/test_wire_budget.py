"""Counting a request's map entries in its wire format (agentfleet.rpc.wire_budget): refused
past the cap wherever the maps are (top level, Structs inside lists inside Structs), never
below it, every field counted (so no garbage is read unbounded), and nothing read in
messages that hold no map or under the size it starts at."""

from __future__ import annotations

import pytest
from google.protobuf import struct_pb2

from agentfleet.request_checks import MAX_REQUEST_VALUES, request_violations
from agentfleet.rpc.wire_budget import SCAN_FROM_BYTES, TooManyEntries, check_entries
from agentfleet.v1 import executor_pb2, history_pb2, registry_pb2


def _labels(count: int, value: str = "") -> bytes:
    request = executor_pb2.StartRunRequest(
        project_id="p", labels={f"k{i}": value for i in range(count)}
    )
    return request.SerializeToString()


def test_a_map_past_the_cap_is_refused_and_one_at_it_is_not() -> None:
    # Every field counts: project_id and each entry, as the field walk counts them.
    with pytest.raises(TooManyEntries, match=f"more than {MAX_REQUEST_VALUES:,}"):
        check_entries(_labels(MAX_REQUEST_VALUES), executor_pb2.StartRunRequest.DESCRIPTOR)
    check_entries(_labels(MAX_REQUEST_VALUES - 1), executor_pb2.StartRunRequest.DESCRIPTOR)
    at_the_cap = executor_pb2.StartRunRequest.FromString(_labels(MAX_REQUEST_VALUES - 1))
    assert request_violations(at_the_cap) == []


def test_structs_nested_in_lists_are_counted() -> None:
    manifest = struct_pb2.Struct()
    agents = manifest.fields["agents"].list_value
    for i in range(MAX_REQUEST_VALUES // 4 + 1):
        agents.values.add().struct_value.update({"name": f"a{i}"})
    data = registry_pb2.InstallProductRequest(manifest=manifest).SerializeToString()
    assert len(data) >= SCAN_FROM_BYTES
    with pytest.raises(TooManyEntries):
        check_entries(data, registry_pb2.InstallProductRequest.DESCRIPTOR)


def test_big_strings_and_packed_values_are_not_counted() -> None:
    big = executor_pb2.StartRunRequest(project_id="p", input="x" * 8_000_000)
    check_entries(big.SerializeToString(), executor_pb2.StartRunRequest.DESCRIPTOR)
    statuses = history_pb2.ListRunsRequest(project_id="p", statuses=[3] * 4_000_000)
    check_entries(statuses.SerializeToString(), history_pb2.ListRunsRequest.DESCRIPTOR)


def test_small_requests_are_not_read() -> None:
    data = _labels(1000, "v")
    assert len(data) < SCAN_FROM_BYTES
    check_entries(data, executor_pb2.StartRunRequest.DESCRIPTOR)


def test_bytes_that_are_not_wire_format_are_left_to_the_parser() -> None:
    for garbage in (b"\xff", b"\x0b", b"\x80"):  # endless varint, group, cut-off varint
        check_entries(garbage * SCAN_FROM_BYTES, executor_pb2.StartRunRequest.DESCRIPTOR)


def test_millions_of_scalar_fields_are_counted_too() -> None:
    with pytest.raises(TooManyEntries):
        check_entries(b"\x08\x01" * SCAN_FROM_BYTES, executor_pb2.StartRunRequest.DESCRIPTOR)
