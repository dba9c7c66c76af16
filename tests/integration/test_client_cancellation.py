"""A caller that gives up on a unary call cancels it on the server too, through the
tracing interceptors every agentfleet channel carries (opentelemetry-python-contrib#3271:
with OpenTelemetry's interceptor alone the server ran the call to its end)."""

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest

from agentfleet.auth import AllowAll
from agentfleet.clients import open_channel
from agentfleet.grpc_server import Registration, RunningServer, start_server
from agentfleet.v1 import history_pb2, history_pb2_grpc


class NeverAnswers(history_pb2_grpc.HistoryServiceServicer):
    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.cancelled = asyncio.Event()

    async def GetRun(self, request, context):  # type: ignore[no-untyped-def]
        self.started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise


@pytest.fixture
async def servicer() -> NeverAnswers:
    return NeverAnswers()


@pytest.fixture
async def server(servicer: NeverAnswers) -> AsyncIterator[RunningServer]:
    running = await start_server(
        host="127.0.0.1",
        port=0,
        registrations=[Registration.of(history_pb2, history_pb2_grpc, "HistoryService", servicer)],
        authenticator=AllowAll(),
    )
    yield running
    await running.stop(0)


async def test_cancelling_the_caller_cancels_the_call_on_the_server(
    server: RunningServer, servicer: NeverAnswers
) -> None:
    async with open_channel(f"127.0.0.1:{server.port}") as channel:
        stub = history_pb2_grpc.HistoryServiceStub(channel)

        async def call() -> None:
            await stub.GetRun(history_pb2.GetRunRequest(project_id="p", run_id="r"))

        caller = asyncio.create_task(call())
        await asyncio.wait_for(servicer.started.wait(), timeout=10)
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        await asyncio.wait_for(servicer.cancelled.wait(), timeout=10)


async def test_a_deadline_still_ends_the_call(
    server: RunningServer, servicer: NeverAnswers
) -> None:
    """The wrapper changes nothing but cancellation: a deadline is still the caller's error."""
    async with open_channel(f"127.0.0.1:{server.port}") as channel:
        stub = history_pb2_grpc.HistoryServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.GetRun(history_pb2.GetRunRequest(project_id="p", run_id="r"), timeout=0.3)
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
