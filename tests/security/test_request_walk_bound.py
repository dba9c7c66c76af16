"""A request's size cannot stall a shared process. Two costs ran on the loop every project's
calls share, each as big as the caller chose (up to the 16 MiB message limit):

- gRPC parses a request as it arrives, before authentication, and upb parses big maps in far
  more than linear time: a StartRun with 1.2 million labels (15 MB) took 40 s. Requests of
  1 MiB or more are now counted in their wire format first (``agentfleet.rpc.wire_budget``) and
  refused unparsed past MAX_REQUEST_VALUES values.
- The interceptor's check of every field (NUL characters, NaN, Durations:
  ``agentfleet.request_checks``) visited each value: 4 million packed statuses in a ListRuns
  (4 MB, parsed in 80 ms) took 4.6 s, a manifest list of 1.5 million numbers 4.8 s. The walk
  now stops at MAX_REQUEST_VALUES (INVALID_ARGUMENT naming the field) and a big request is
  walked in a thread.

Measured: another project's cheapest call while the attack runs (at most max(1.5 s, 10x its
baseline)) and the test's own loop, the in-process services', standing still."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Any

import grpc
from google.protobuf import struct_pb2

from agentfleet.request_checks import MAX_REQUEST_VALUES
from agentfleet.testing.checks.loop_stall import longest_stall_during
from agentfleet.testing.rpc_errors import field_violations, rpc_error
from agentfleet.testing.services import Stack
from agentfleet.v1 import (
    common_pb2,
    executor_pb2,
    executor_pb2_grpc,
    history_pb2,
    history_pb2_grpc,
    registry_pb2,
    registry_pb2_grpc,
)

ATTACKS = 1
"""Concurrent attacking calls."""
UNPARSED = (
    "the request cannot be parsed: the request holds more than "
    f"{MAX_REQUEST_VALUES:,} values (fields, list items, map entries); send fewer per call"
)


async def _bystander_latency(stack: Stack, during: Awaitable[Any]) -> tuple[float, float, Any]:
    """Another project's ListRuns: its baseline, its slowest while ``during`` runs, and what
    ``during`` returned."""
    token = await stack.create_token("bystander", role="member")
    history = history_pb2_grpc.HistoryServiceStub(stack.channel("history", token=token))
    request = history_pb2.ListRunsRequest(project_id="bystander")

    async def timed() -> float:
        started = time.monotonic()
        await history.ListRuns(request, timeout=30)
        return time.monotonic() - started

    baseline = min([await timed() for _ in range(5)])
    attack = asyncio.ensure_future(during)
    slowest = 0.0
    while not attack.done():
        slowest = max(slowest, await timed())
    return baseline, slowest, await attack


async def test_a_manifest_list_of_a_million_values_is_refused_before_it_is_parsed(
    stack: Stack,
) -> None:
    token = await stack.create_token("attacker", role="admin")
    registry = registry_pb2_grpc.AgentRegistryServiceStub(stack.channel("executor", token=token))
    manifest = struct_pb2.Struct()
    values = manifest.fields["agents"].list_value.values
    for number in range(1_500_000):
        values.add().number_value = number
    request = registry_pb2.InstallProductRequest(
        project_id="attacker", manifest=manifest, validate_only=True
    )
    assert request.ByteSize() > 15 * 1024 * 1024

    async def attacks() -> list[grpc.aio.AioRpcError]:
        calls = [rpc_error(registry.InstallProduct(request, timeout=60)) for _ in range(ATTACKS)]
        return list(await asyncio.gather(*calls))

    (baseline, slowest, errors), stall = await longest_stall_during(
        _bystander_latency(stack, attacks())
    )
    for error in errors:
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert error.details() == UNPARSED
    assert slowest <= max(1.5, 10 * baseline), (baseline, slowest)
    assert stall < 1.0, stall


async def test_four_million_statuses_are_refused_without_walking_them(stack: Stack) -> None:
    # Packed enums: no message to count before parsing, and linear to parse (40 ms); the walk
    # visited each of them (4.6 s).
    token = await stack.create_token("attacker", role="member")
    history = history_pb2_grpc.HistoryServiceStub(stack.channel("history", token=token))
    statuses = [common_pb2.RUN_STATUS_COMPLETED] * 4_000_000
    request = history_pb2.ListRunsRequest(project_id="attacker", statuses=statuses)

    async def attacks() -> list[grpc.aio.AioRpcError]:
        calls = [rpc_error(history.ListRuns(request, timeout=60)) for _ in range(ATTACKS)]
        return list(await asyncio.gather(*calls))

    (baseline, slowest, errors), stall = await longest_stall_during(
        _bystander_latency(stack, attacks())
    )
    for error in errors:
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert f"more than {MAX_REQUEST_VALUES:,} values" in field_violations(error)["statuses"]
    assert slowest <= max(1.5, 10 * baseline), (baseline, slowest)
    assert stall < 1.0, stall


async def test_a_million_labels_are_refused_before_they_are_parsed(stack: Stack) -> None:
    # upb parses a big map in far more than linear time: these 15 MB took 40 s to parse,
    # on the executor's loop, before the caller was even authenticated.
    token = await stack.create_token("attacker", role="member")
    executor = executor_pb2_grpc.ExecutorServiceStub(stack.channel("executor", token=token))
    labels = {f"k{i}": "" for i in range(1_200_000)}
    request = executor_pb2.StartRunRequest(
        project_id="attacker", agent_name="anyone", input="hi", labels=labels
    )
    assert request.ByteSize() > 14 * 1024 * 1024

    async def attacks() -> list[grpc.aio.AioRpcError]:
        calls = [rpc_error(executor.StartRun(request, timeout=60)) for _ in range(ATTACKS)]
        return list(await asyncio.gather(*calls))

    (baseline, slowest, errors), stall = await longest_stall_during(
        _bystander_latency(stack, attacks())
    )
    for error in errors:
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert error.details() == UNPARSED
    assert slowest <= max(1.5, 10 * baseline), (baseline, slowest)
    assert stall < 1.0, stall
