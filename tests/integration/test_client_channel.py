"""What every agentfleet client channel (``open_channel``) does to a call: W3C trace
context crosses the hop, so the server's span continues the caller's trace; and a caller
that gives up on a unary call cancels it on the server too (with OpenTelemetry's client
interceptor alone the server ran it to its end: opentelemetry-python-contrib#3271)."""

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentfleet.auth import AllowAll
from agentfleet.observability.telemetry import current_trace_id
from agentfleet.rpc.clients import open_channel
from agentfleet.rpc.grpc_server import Registration, RunningServer, start_server
from agentfleet.v1 import common_pb2, history_pb2, history_pb2_grpc

NEVER = "never-answered"
"""The run id GetRun never answers."""


class Probe(history_pb2_grpc.HistoryServiceServicer):
    """GetRun answers the trace id it runs in, except for :data:`NEVER`, which it holds
    until the call is cancelled."""

    def __init__(self) -> None:
        self.held = asyncio.Event()
        self.cancelled = asyncio.Event()

    async def GetRun(self, request, context):  # type: ignore[no-untyped-def]
        if request.run_id == NEVER:
            self.held.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
        return history_pb2.GetRunResponse(
            run=common_pb2.AgentRun(id=request.run_id, trace_id=current_trace_id() or "")
        )


@pytest.fixture
def probe() -> Probe:
    return Probe()


@pytest.fixture
async def server(probe: Probe) -> AsyncIterator[RunningServer]:
    running = await start_server(
        host="127.0.0.1",
        port=0,
        registrations=[Registration.of(history_pb2, history_pb2_grpc, "HistoryService", probe)],
        authenticator=AllowAll(),
    )
    yield running
    await running.stop(0)


async def test_the_server_continues_the_callers_trace(
    server: RunningServer, spans: InMemorySpanExporter
) -> None:
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("caller") as caller:
        async with open_channel(f"127.0.0.1:{server.port}") as channel:
            reply = await history_pb2_grpc.HistoryServiceStub(channel).GetRun(
                history_pb2.GetRunRequest(project_id="p", run_id="r")
            )
    expected = format(caller.get_span_context().trace_id, "032x")
    assert reply.run.trace_id == expected
    rpc_spans = {
        s.kind: s
        for s in spans.get_finished_spans()
        if s.name == "/agentfleet.v1.HistoryService/GetRun"
    }
    assert set(rpc_spans) == {trace.SpanKind.CLIENT, trace.SpanKind.SERVER}
    client, served = rpc_spans[trace.SpanKind.CLIENT], rpc_spans[trace.SpanKind.SERVER]
    assert format(served.context.trace_id, "032x") == expected
    assert served.parent is not None
    assert served.parent.span_id == client.context.span_id


async def test_cancelling_the_caller_cancels_the_call_on_the_server(
    server: RunningServer, probe: Probe
) -> None:
    async with open_channel(f"127.0.0.1:{server.port}") as channel:
        stub = history_pb2_grpc.HistoryServiceStub(channel)

        async def call() -> None:
            await stub.GetRun(history_pb2.GetRunRequest(project_id="p", run_id=NEVER))

        caller = asyncio.create_task(call())
        await asyncio.wait_for(probe.held.wait(), timeout=10)
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        await asyncio.wait_for(probe.cancelled.wait(), timeout=10)


async def test_a_deadline_still_ends_the_call(server: RunningServer) -> None:
    """The cancel changes nothing else: a deadline is still the caller's error."""
    async with open_channel(f"127.0.0.1:{server.port}") as channel:
        stub = history_pb2_grpc.HistoryServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.GetRun(history_pb2.GetRunRequest(project_id="p", run_id=NEVER), timeout=0.3)
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
