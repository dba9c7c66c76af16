"""Spans are recorded only while something exports them; trace ids are made either way
(runs store them, hops propagate them)."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from agentfleet.observability.telemetry import RecordWhileExported


def test_nothing_is_recorded_until_something_exports() -> None:
    sampler = RecordWhileExported()
    tracer = TracerProvider(sampler=sampler).get_tracer("test")
    with tracer.start_as_current_span("unexported") as span:
        assert not span.is_recording()
        context = span.get_span_context()
        assert context.is_valid  # a trace id all the same
        with tracer.start_as_current_span("child") as child:
            assert child.get_span_context().trace_id == context.trace_id
    sampler.exporting = True
    with tracer.start_as_current_span("exported") as span:
        assert span.is_recording()
        assert span.get_span_context().trace_flags.sampled


def test_once_exporting_a_caller_s_decision_is_kept() -> None:
    sampler = RecordWhileExported()
    sampler.exporting = True
    tracer = TracerProvider(sampler=sampler).get_tracer("test")
    for flags, recorded in ((TraceFlags.SAMPLED, True), (TraceFlags.DEFAULT, False)):
        remote = SpanContext(
            trace_id=0x1234, span_id=0x5678, is_remote=True, trace_flags=TraceFlags(flags)
        )
        parent = trace.set_span_in_context(NonRecordingSpan(remote))
        with tracer.start_as_current_span("served", context=parent) as span:
            assert span.is_recording() is recorded
            assert span.get_span_context().trace_id == 0x1234
