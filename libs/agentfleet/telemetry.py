"""OpenTelemetry setup: one tracer provider per process, OTLP export when configured.

Trace context crosses gRPC hops through the OpenTelemetry gRPC interceptors installed by
:mod:`agentfleet.grpc_server` (server side) and :mod:`agentfleet.clients` (client side).
"""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from agentfleet.config import Settings

_provider: TracerProvider | None = None


def configure_tracing(
    settings: Settings, *, service: str, extra_processor: SpanProcessor | None = None
) -> TracerProvider:
    """Installs the global tracer provider once; later calls return the same provider."""
    global _provider
    if _provider is not None:
        if extra_processor is not None:
            _provider.add_span_processor(extra_processor)
        return _provider
    resource = Resource.create({"service.name": settings.otel_service_name or service})
    provider = TracerProvider(resource=resource)
    if settings.otlp_endpoint:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    if extra_processor is not None:
        provider.add_span_processor(extra_processor)
    trace.set_tracer_provider(provider)
    _provider = provider
    return provider


def shutdown_tracing() -> None:
    if _provider is not None:
        _provider.shutdown()


def current_trace_id() -> str | None:
    """The active trace id as 32 hex digits, or None outside a recording span."""
    ctx = trace.get_current_span().get_span_context()
    return format(ctx.trace_id, "032x") if ctx.is_valid else None
