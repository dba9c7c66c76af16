"""The console process: uvicorn serving :func:`services.console.routes.build_app` on
AGENTFLEET_CONSOLE_PORT (8080), reaching the services at their AGENTFLEET_<SERVICE>_ADDR.

Unlike the four gRPC services it has no database and no credential of its own: it needs
nothing but the services' addresses (and their TLS CA, if they serve TLS). SIGTERM stops it
after open requests finish (live views end).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Iterator

import structlog
import uvicorn

from agentfleet.config import ConfigError, load_settings
from agentfleet.console_settings import load_console_settings
from agentfleet.observability.logging import configure_logging
from agentfleet.process.hardening import make_non_dumpable
from agentfleet.process.stop_signals import stop_event
from agentfleet.rpc.grpc_server import PortInUse
from services.a2a.server import bind_http
from services.console.backend import Backend
from services.console.routes import build_app

log = structlog.get_logger(__name__)


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling (which re-raises SIGTERM after shutdown, so
    the process would exit by the signal, not with 0): :func:`stop_event` owns them."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def serve() -> None:
    settings = load_settings()
    console_settings = load_console_settings()
    configure_logging(settings, service="console")
    sock = bind_http(settings.listen_host, console_settings.port, setting="AGENTFLEET_CONSOLE_PORT")
    backend = Backend(settings)
    server = _Server(
        uvicorn.Config(
            build_app(console_settings, backend),
            lifespan="off",
            log_config=None,
            access_log=False,
            timeout_keep_alive=30,
            # Requests at once (live views included), as a gRPC server of ours takes; past
            # it uvicorn answers 503.
            limit_concurrency=settings.grpc_limits.max_concurrent_rpcs,
            # Live views stay open: on SIGTERM they are given this long, then cut.
            timeout_graceful_shutdown=5,
            # The ingress or load balancer in front sets X-Forwarded-*; trusted only from
            # the addresses in FORWARDED_ALLOW_IPS (uvicorn's default: loopback).
            proxy_headers=True,
        )
    )
    log.info("console_http", port=sock.getsockname()[1], host=settings.listen_host)
    stop = stop_event()
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    stopping = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
        server.should_exit = True
        await serving
    finally:
        stopping.cancel()
        await backend.close()
        sock.close()


def main() -> None:
    make_non_dumpable()  # holds the signed-in users' tokens
    try:
        asyncio.run(serve())
    except ConfigError as exc:
        print(f"console: {exc}", file=sys.stderr)
        sys.exit(2)
    except (PortInUse, OSError) as exc:
        print(f"console: {exc}", file=sys.stderr)
        sys.exit(1)
