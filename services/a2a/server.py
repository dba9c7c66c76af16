"""The a2a service: an HTTP server (uvicorn) for the A2A JSON-RPC binding and agent cards,
beside the gRPC server every service has (health, readiness, metrics)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator

import grpc
import structlog
import uvicorn

from agentfleet.a2a_settings import load_a2a_settings
from agentfleet.process.service_runtime import ServiceContext, ServiceParts
from agentfleet.rpc.grpc_server import PortInUse
from services.a2a.app import build_app
from services.a2a.backend import Backend
from services.a2a.grpc_binding import start_grpc_binding

log = structlog.get_logger(__name__)


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: the service runtime owns SIGTERM/SIGINT and
    stops this server through ``should_exit``."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def build(context: ServiceContext) -> ServiceParts:
    a2a_settings = load_a2a_settings()
    # Bound here, before anything starts: a port in use stops the service with one line, and
    # port 0 gets its real number logged.
    sock = bind_http(context.settings.listen_host, a2a_settings.http_port)
    port = sock.getsockname()[1]
    backend = Backend(context.settings)
    grpc_binding: grpc.aio.Server | None = None
    grpc_port = 0
    if a2a_settings.grpc_binding_port >= 0:
        grpc_binding, grpc_port = await start_grpc_binding(
            backend,
            host=context.settings.listen_host,
            port=a2a_settings.grpc_binding_port,
            max_message_bytes=a2a_settings.max_body_bytes,
            max_concurrent=context.settings.grpc_limits.max_concurrent_rpcs,
        )
    server = _Server(
        uvicorn.Config(
            build_app(backend, a2a_settings, grpc_port=grpc_port),
            lifespan="off",
            log_config=None,
            access_log=False,
            # As many requests at once as a gRPC server of this process takes (past it: 503),
            # and idle keep-alive connections closed, so idle clients hold no sockets.
            timeout_keep_alive=30,
            limit_concurrency=context.settings.grpc_limits.max_concurrent_rpcs,
        )
    )

    async def serve_http(stopping: asyncio.Event) -> None:
        serving = asyncio.create_task(server.serve(sockets=[sock]))
        stop = asyncio.create_task(stopping.wait())
        await asyncio.wait({serving, stop}, return_when=asyncio.FIRST_COMPLETED)
        server.should_exit = True
        stop.cancel()
        await serving
        if not stopping.is_set():
            raise RuntimeError(f"the A2A HTTP server stopped (port {port})")

    async def close() -> None:
        if grpc_binding is not None:
            await grpc_binding.stop(grace=min(5.0, context.settings.shutdown_grace_s))
        await backend.close()
        sock.close()

    log.info("a2a_http", port=port, grpc_binding_port=grpc_port, host=context.settings.listen_host)
    return ServiceParts(registrations=(), background=(serve_http,), on_stop=(close,))


def bind_http(host: str, port: int, *, setting: str = "AGENTFLEET_A2A_HTTP_PORT") -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        # As uvicorn binds: a restarted service may reuse its port at once.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise PortInUse(
            f"cannot listen on {host}:{port} ({exc.strerror}); set {setting} to use another port"
        ) from None
    sock.set_inheritable(True)
    return sock
