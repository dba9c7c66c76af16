"""W3C trace context crosses a gRPC hop: the server's span continues the caller's trace."""

from collections.abc import AsyncIterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentfleet.auth import AllowAll
from agentfleet.clients import open_channel
from agentfleet.grpc_server import Registration, RunningServer, start_server
from agentfleet.telemetry import current_trace_id
from agentfleet.v1 import common_pb2, history_pb2, history_pb2_grpc


class TraceEcho(history_pb2_grpc.HistoryServiceServicer):
    async def GetRun(self, request, context):  # type: ignore[no-untyped-def]
        return history_pb2.GetRunResponse(
            run=common_pb2.AgentRun(id=request.run_id, trace_id=current_trace_id() or "")
        )


@pytest.fixture
async def server(spans: InMemorySpanExporter) -> AsyncIterator[RunningServer]:
    running = await start_server(
        host="127.0.0.1",
        port=0,
        registrations=[
            Registration.of(history_pb2, history_pb2_grpc, "HistoryService", TraceEcho())
        ],
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
