"""The a2a service: an HTTP server (uvicorn) for the A2A JSON-RPC binding and agent cards,
beside the gRPC server every service has (health, readiness, metrics)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

import structlog
import uvicorn

from agentfleet.service_runtime import ServiceContext, ServiceParts
from services.a2a.app import build_app
from services.a2a.backend import Backend
from services.a2a.settings import load_a2a_settings

log = structlog.get_logger(__name__)


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: the service runtime owns SIGTERM/SIGINT and
    stops this server through ``should_exit``."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def build(context: ServiceContext) -> ServiceParts:
    a2a_settings = load_a2a_settings()
    backend = Backend(context.settings)
    server = _Server(
        uvicorn.Config(
            build_app(backend, a2a_settings),
            host=context.settings.listen_host,
            port=a2a_settings.http_port,
            lifespan="off",
            log_config=None,
            access_log=False,
            # Bounded like the gRPC side: no request may hold the loop or a connection long.
            timeout_keep_alive=30,
            limit_concurrency=1000,
        )
    )

    async def serve_http(stopping: asyncio.Event) -> None:
        serving = asyncio.create_task(server.serve())
        stop = asyncio.create_task(stopping.wait())
        await asyncio.wait({serving, stop}, return_when=asyncio.FIRST_COMPLETED)
        server.should_exit = True
        stop.cancel()
        await serving
        if not stopping.is_set():
            raise RuntimeError(f"the A2A HTTP server stopped (port {a2a_settings.http_port})")

    log.info("a2a_http", port=a2a_settings.http_port, host=context.settings.listen_host)
    return ServiceParts(registrations=(), background=(serve_http,), on_stop=(backend.close,))
