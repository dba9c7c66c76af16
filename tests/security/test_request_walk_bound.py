"""A request's size cannot stall a shared process: the interceptor's check of every field of
every request (NUL characters, NaN, Durations: ``agentfleet.request_checks``) walked
whatever arrived, 16 MiB being the server's message limit. An InstallProduct whose
manifest holds a list of 1.5 million numbers (16 MB) held the executor's loop 4.8 s per
call in that walk, every project's calls with it, before the registry looked at it (any
RPC with a Struct, list or map field alike: StartRun's labels, task properties, graph
objects, DecideToolCall's arguments). A request now holds at most MAX_REQUEST_VALUES values
(the walk stops there: INVALID_ARGUMENT naming the field) and a big one is walked in a
thread. Measured: another project's cheapest call while the attacks run, and the test's own
loop (the in-process services') standing still."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Any

import grpc
from google.protobuf import struct_pb2

from agentfleet.request_checks import MAX_REQUEST_VALUES
from agentfleet.testing.loop_stall import longest_stall_during
from agentfleet.testing.rpc_errors import field_violations, rpc_error
from agentfleet.testing.services import Stack
from agentfleet.v1 import (
    history_pb2,
    history_pb2_grpc,
    registry_pb2,
    registry_pb2_grpc,
)

ATTACKS = 1
"""Concurrent attacking calls."""


def _nested_manifest(lists: int) -> struct_pb2.Struct:
    """A manifest of ``lists`` small lists: many values, each list far under any cap."""
    manifest = struct_pb2.Struct()
    manifest.update({"name": "big", "version": "1.0.0"})
    outer = manifest.fields["agents"].list_value
    for _ in range(lists):
        inner = outer.values.add().list_value
        for _ in range(3):
            inner.values.add().string_value = "x"
    return manifest


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


async def test_a_list_of_a_million_values_is_refused_without_holding_the_loop(
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
        why = field_violations(error)["manifest.fields['agents'].list_value.values"]
        assert f"more than {MAX_REQUEST_VALUES:,} values" in why
    assert slowest <= max(1.5, 10 * baseline), (baseline, slowest)
    assert stall < 1.0, stall


async def test_a_manifest_of_many_small_lists_is_walked_off_the_loop(stack: Stack) -> None:
    token = await stack.create_token("attacker", role="admin")
    registry = registry_pb2_grpc.AgentRegistryServiceStub(stack.channel("executor", token=token))
    request = registry_pb2.InstallProductRequest(
        project_id="attacker", manifest=_nested_manifest(200_000), validate_only=True
    )

    async def attacks() -> list[grpc.aio.AioRpcError]:
        calls = [rpc_error(registry.InstallProduct(request, timeout=60)) for _ in range(ATTACKS)]
        return list(await asyncio.gather(*calls))

    (baseline, slowest, errors), stall = await longest_stall_during(
        _bystander_latency(stack, attacks())
    )
    for error in errors:
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        ((where, why),) = field_violations(error).items()
        assert where.startswith("manifest.fields['agents'].list_value.values["), where
        assert f"more than {MAX_REQUEST_VALUES:,} values" in why
    assert slowest <= max(1.5, 10 * baseline), (baseline, slowest)
    assert stall < 1.0, stall
