"""pytest fixture ``spans``: an in-memory span exporter installed once, cleared per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentfleet.config import load_settings
from agentfleet.observability.telemetry import configure_tracing

_exporter = InMemorySpanExporter()
_installed = False


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The spans this test's process finished, so traces are asserted, not eyeballed."""
    global _installed
    if not _installed:
        configure_tracing(
            load_settings({}),
            service="agentfleet-tests",
            extra_processor=SimpleSpanProcessor(_exporter),
        )
        _installed = True
    _exporter.clear()
    yield _exporter
    _exporter.clear()
