"""Where a service process's metrics go: one MeterProvider, a Prometheus ``/metrics``
endpoint on the service's metrics port, OTLP export when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is
set, and the sampler that refreshes the queue gauges (and the trigger outbox's) (RPCs are timed by
:mod:`agentfleet.rpc.rpc_metrics`).

``/metrics`` is served from the service's own event loop (aiohttp), so the gauges' callbacks
read the pools and samples in the thread that writes them. A metrics port already in use
costs the endpoint, not the service: one warning names the setting to change.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import asyncpg
import structlog
from aiohttp import web
from opentelemetry import metrics as otel_metrics
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from agentfleet.config import Settings
from agentfleet.observability import metrics
from agentfleet.queue_depth import (
    ACTIVE_RUNS_BY_PROJECT_SQL,
    TASKS_BY_STATE_SQL,
    TRIGGER_OUTBOX_BACKLOG_SQL,
)

log = structlog.get_logger(__name__)

_SAMPLES: dict[str, Callable[[asyncpg.Pool], Awaitable[None]]] = {}
"""Per service, the sampler query that refreshes its queue gauges (registered below)."""


def build_provider(settings: Settings, *, service: str) -> tuple[MeterProvider, CollectorRegistry]:
    """A provider exporting to its own Prometheus registry, and by OTLP when configured."""
    registry = CollectorRegistry(auto_describe=True)
    readers: list[MetricReader] = [PrometheusMetricReader(registry=registry)]
    if settings.otlp_endpoint:
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter

        readers.append(PeriodicExportingMetricReader(OTLPMetricExporter()))
    resource = Resource.create({"service.name": settings.otel_service_name or service})
    return MeterProvider(resource=resource, metric_readers=readers), registry


@dataclass(kw_only=True, slots=True)
class MetricsExport:
    """A process's running metrics: the provider, the endpoint and the sampler it owns."""

    provider: MeterProvider
    registry: CollectorRegistry
    runner: web.AppRunner | None = None
    sampler: asyncio.Task[None] | None = None
    stopping: asyncio.Event

    async def stop(self) -> None:
        """Stops sampling and serving, then flushes the OTLP export; idempotent."""
        if self.stopping.is_set():
            return
        self.stopping.set()
        if self.sampler is not None:
            await self.sampler
        if self.runner is not None:
            await self.runner.cleanup()
        self.provider.shutdown()


async def start_metrics(name: str, settings: Settings, pool: asyncpg.Pool) -> MetricsExport:
    """Installs the global meter provider of service ``name`` and starts its endpoint (on
    ``AGENTFLEET_<NAME>_METRICS_PORT`` of the listen host; 0 = none) and its sampler."""
    provider, registry = build_provider(settings, service=f"agentfleet-{name}")
    otel_metrics.set_meter_provider(provider)
    metrics.observe_db_pool(pool, name)
    export = MetricsExport(provider=provider, registry=registry, stopping=asyncio.Event())
    port = settings.metrics_ports.get(name, 0)
    if port:
        export.runner = await _serve_metrics(registry, settings.listen_host, port, name)
    sample = _SAMPLES.get(name)
    if sample is not None:
        export.sampler = asyncio.create_task(
            _sample_every(sample, pool, settings.metrics_sample_s, export.stopping)
        )
    return export


async def _serve_metrics(
    registry: CollectorRegistry, host: str, port: int, name: str
) -> web.AppRunner | None:
    async def scrape(_request: web.Request) -> web.Response:
        body = generate_latest(registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/metrics", scrape)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except OSError as exc:
        await runner.cleanup()
        log.warning(
            "metrics endpoint not served",
            address=f"{host}:{port}",
            error=str(exc),
            hint=f"set AGENTFLEET_{name.upper()}_METRICS_PORT to a free port (0 = off)",
        )
        return None
    log.info("serving metrics", address=f"{host}:{port}", path="/metrics")
    return runner


async def _sample_every(
    sample: Callable[[asyncpg.Pool], Awaitable[None]],
    pool: asyncpg.Pool,
    interval_s: float,
    stopping: asyncio.Event,
) -> None:
    failing = False
    while not stopping.is_set():
        try:
            await sample(pool)
            failing = False
        except (TimeoutError, asyncpg.PostgresError, OSError) as exc:
            # One line per outage, not one per interval; info, as the service reports the
            # database outage itself.
            if not failing:
                log.info("metrics_sample_failed", error=str(exc), gauges="keep their last values")
            failing = True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), interval_s)


async def sample_active_runs(pool: asyncpg.Pool) -> None:
    rows = await pool.fetch(ACTIVE_RUNS_BY_PROJECT_SQL, timeout=10)
    metrics.set_active_runs((r["project_id"], r["status"], r["runs"]) for r in rows)


async def sample_executor(pool: asyncpg.Pool) -> None:
    """The executor's gauges: its runs, and the trigger outbox its consumers drain."""
    await sample_active_runs(pool)
    backlog = await pool.fetchrow(TRIGGER_OUTBOX_BACKLOG_SQL, timeout=10)
    assert backlog is not None  # scalar subqueries: always one row
    metrics.set_trigger_outbox(backlog["pending"], backlog["oldest_age_s"])


async def sample_tasks(pool: asyncpg.Pool) -> None:
    rows = await pool.fetch(TASKS_BY_STATE_SQL, timeout=10)
    metrics.set_tasks((r["state"], r["tasks"]) for r in rows)


_SAMPLES.update(executor=sample_executor, dispatcher=sample_tasks)
