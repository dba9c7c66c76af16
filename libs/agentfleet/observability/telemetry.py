"""OpenTelemetry setup: one tracer provider per process, OTLP export when configured.

Spans are recorded only while something exports them (an OTLP endpoint, or a processor a
test adds): with nothing to export, a recorded span is CPU spent for nothing (12.6 us a
span recorded, 5.1 us not, on this project's 2-core machine; a step makes about three).
Trace ids are made and propagated either way, so runs still store them and a later hop
still joins the trace; OTEL_TRACES_SAMPLER, when set, decides instead.

Trace context crosses gRPC hops through the OpenTelemetry gRPC interceptors installed by
:mod:`agentfleet.rpc.grpc_server` (server side) and :mod:`agentfleet.rpc.clients` (client side).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from opentelemetry import context, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_OFF,
    DEFAULT_ON,
    Sampler,
    SamplingResult,
)
from opentelemetry.trace import Link, SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.trace.span import TraceState
from opentelemetry.util.types import Attributes

from agentfleet.config import Settings

_provider: TracerProvider | None = None


class RecordWhileExported(Sampler):
    """The SDK's default (parent-based, always on) once :attr:`exporting`; before, no span
    is recorded (ids are made all the same)."""

    def __init__(self) -> None:
        self.exporting = False

    def should_sample(
        self,
        parent_context: context.Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: TraceState | None = None,
    ) -> SamplingResult:
        sampler = DEFAULT_ON if self.exporting else ALWAYS_OFF
        return sampler.should_sample(
            parent_context, trace_id, name, kind, attributes, links, trace_state
        )

    def get_description(self) -> str:
        return f"RecordWhileExported{{exporting={self.exporting}}}"


_sampler = RecordWhileExported()


def configure_tracing(
    settings: Settings, *, service: str, extra_processor: SpanProcessor | None = None
) -> TracerProvider:
    """Installs the global tracer provider once; later calls return the same provider."""
    global _provider
    if _provider is not None:
        if extra_processor is not None:
            _provider.add_span_processor(extra_processor)
            _sampler.exporting = True
        return _provider
    resource = Resource.create({"service.name": settings.otel_service_name or service})
    chosen = bool(os.environ.get("OTEL_TRACES_SAMPLER"))  # the SDK reads it when given none
    provider = TracerProvider(resource=resource, sampler=None if chosen else _sampler)
    if settings.otlp_endpoint:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        _sampler.exporting = True
    if extra_processor is not None:
        provider.add_span_processor(extra_processor)
        _sampler.exporting = True
    trace.set_tracer_provider(provider)
    _provider = provider
    return provider


def shutdown_tracing() -> None:
    if _provider is not None:
        _provider.shutdown()


def current_traceparent() -> str | None:
    """The W3C traceparent of the current span (None when nothing is traced), for a hop
    that the propagators do not cross: a row another process reads later (a child run, an
    outbox event)."""
    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return carrier.get("traceparent")


def trace_id_of(traceparent: str | None) -> str | None:
    """The 32 hex digits of a W3C traceparent's trace id (None for none or a malformed one)."""
    parts = (traceparent or "").split("-")
    if len(parts) != 4 or len(parts[1]) != 32 or parts[1] == "0" * 32:
        return None
    try:
        int(parts[1], 16)
    except ValueError:
        return None
    return parts[1].lower()


def current_trace_id() -> str | None:
    """The active trace id as 32 hex digits, or None outside a recording span."""
    ctx = trace.get_current_span().get_span_context()
    return format(ctx.trace_id, "032x") if ctx.is_valid else None
