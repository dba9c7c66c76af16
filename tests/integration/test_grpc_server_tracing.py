"""The SERVER span of every RPC (OpenTelemetry's gRPC instrumentation) carries the status the
RPC ends with, refused and failed ones included, though our errors reach the caller through
``abort_with_status``, which the instrumentation does not see."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import grpc
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentfleet.auth import AllowAll
from agentfleet.errors import PermissionDenied
from agentfleet.rpc.clients import open_channel
from agentfleet.rpc.grpc_server import Registration, RunningServer, start_server
from agentfleet.v1 import common_pb2, history_pb2, history_pb2_grpc

METHOD = "/agentfleet.v1.HistoryService/GetRun"


class Failing(history_pb2_grpc.HistoryServiceServicer):
    """GetRun answers, refuses or crashes depending on the run id."""

    async def GetRun(self, request, context):  # type: ignore[no-untyped-def]
        if request.run_id == "refused":
            raise PermissionDenied("not yours")
        if request.run_id == "crash":
            raise RuntimeError("a bug")
        return history_pb2.GetRunResponse(run=common_pb2.AgentRun(id=request.run_id))


@pytest.fixture
async def server(spans: InMemorySpanExporter) -> AsyncIterator[RunningServer]:
    running = await start_server(
        host="127.0.0.1",
        port=0,
        registrations=[Registration.of(history_pb2, history_pb2_grpc, "HistoryService", Failing())],
        authenticator=AllowAll(),
    )
    yield running
    await running.stop(0)


async def _server_span(
    server: RunningServer, spans: InMemorySpanExporter, run_id: str
) -> ReadableSpan:
    spans.clear()
    async with open_channel(f"127.0.0.1:{server.port}") as channel:
        stub = history_pb2_grpc.HistoryServiceStub(channel)
        # Refused and failed calls raise here; their span is what the test reads.
        with contextlib.suppress(grpc.aio.AioRpcError):
            await stub.GetRun(history_pb2.GetRunRequest(project_id="p", run_id=run_id))
    (span,) = [
        s
        for s in spans.get_finished_spans()
        if s.name == METHOD and s.kind == trace.SpanKind.SERVER
    ]
    return span


async def test_the_server_span_names_the_rpc_and_its_status(
    server: RunningServer, spans: InMemorySpanExporter
) -> None:
    served = await _server_span(server, spans, "r1")
    assert served.attributes is not None
    assert served.attributes["rpc.system"] == "grpc"
    assert served.attributes["rpc.service"] == "agentfleet.v1.HistoryService"
    assert served.attributes["rpc.method"] == "GetRun"
    assert served.attributes["rpc.grpc.status_code"] == grpc.StatusCode.OK.value[0]
    assert served.status.status_code == trace.StatusCode.UNSET


async def test_a_refused_rpc_records_its_code_without_marking_the_server_failed(
    server: RunningServer, spans: InMemorySpanExporter
) -> None:
    served = await _server_span(server, spans, "refused")
    assert served.attributes is not None
    assert served.attributes["rpc.grpc.status_code"] == grpc.StatusCode.PERMISSION_DENIED.value[0]
    # The caller's fault, not the server's (OpenTelemetry's RPC conventions).
    assert served.status.status_code == trace.StatusCode.UNSET


async def test_a_crashed_rpc_marks_the_server_span_as_failed(
    server: RunningServer, spans: InMemorySpanExporter
) -> None:
    served = await _server_span(server, spans, "crash")
    assert served.attributes is not None
    assert served.attributes["rpc.grpc.status_code"] == grpc.StatusCode.INTERNAL.value[0]
    assert served.status.status_code == trace.StatusCode.ERROR
    assert any(event.name == "exception" for event in served.events)
