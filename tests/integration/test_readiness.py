"""The readiness monitor on a real gRPC server: a failing or hanging dependency makes
readiness (and the served APIs) NOT_SERVING with one log line, liveness stays SERVING, and
once graceful shutdown began nothing turns it SERVING again. Real dependencies (PostgreSQL
stopped, the toolpool killed) are in tests/e2e/test_readiness.py."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import asyncpg
import structlog
from grpc_health.v1 import health_pb2

from agentfleet.auth import AllowAll
from agentfleet.observability.readiness import PostgresProbe, ReadinessMonitor
from agentfleet.rpc.grpc_server import (
    LIVENESS,
    READINESS,
    Registration,
    RunningServer,
    start_server,
)
from agentfleet.testing.waiting import wait_for
from agentfleet.v1 import history_pb2, history_pb2_grpc

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
HISTORY = "agentfleet.v1.HistoryService"


@dataclass(kw_only=True)
class SwitchedDependency:
    """A dependency the test switches between answering, failing and hanging."""

    name: str = "switched"
    state: str = "up"

    async def check(self) -> None:
        if self.state == "down":
            raise ConnectionRefusedError("connection refused")
        if self.state == "hanging":
            await asyncio.Event().wait()


async def status(server: RunningServer, service: str) -> int:
    reply = await server.health.Check(health_pb2.HealthCheckRequest(service=service), None)
    return reply.status


async def history_server() -> RunningServer:
    registration = Registration.of(
        history_pb2, history_pb2_grpc, "HistoryService", history_pb2_grpc.HistoryServiceServicer()
    )
    return await start_server(
        host="127.0.0.1", port=0, registrations=[registration], authenticator=AllowAll()
    )


async def test_readiness_follows_the_dependency_and_liveness_does_not() -> None:
    server = await history_server()
    dependency = SwitchedDependency()
    monitor = ReadinessMonitor(
        probes=[dependency], set_ready=server.set_ready, interval_s=0.05, timeout_s=0.2
    )
    try:
        with structlog.testing.capture_logs() as logs:
            assert await monitor.check_once() is True
            for state in ("down", "down", "hanging", "up"):
                dependency.state = state
                ready = await monitor.check_once()
                assert ready is (state == "up")
                for service in (READINESS, HISTORY):
                    assert await status(server, service) == (SERVING if ready else NOT_SERVING)
                assert await status(server, LIVENESS) == SERVING
                assert await status(server, "") == SERVING
        # One line per change, not per probe: ready, lost (refused), ready again.
        assert [(e["event"], e["log_level"]) for e in logs] == [
            ("ready", "info"),
            ("not_ready", "warning"),
            ("ready", "info"),
        ]
        assert logs[1]["failing"] == {"switched": "ConnectionRefusedError: connection refused"}
    finally:
        await server.stop(0)


async def test_after_graceful_shutdown_began_readiness_stays_not_serving() -> None:
    server = await history_server()
    dependency = SwitchedDependency()
    monitor = ReadinessMonitor(
        probes=[dependency], set_ready=server.set_ready, interval_s=0.05, timeout_s=0.2
    )
    stopping = asyncio.Event()
    loop = asyncio.create_task(monitor.run(stopping))
    try:
        dependency.state = "down"

        async def not_ready() -> bool:
            return await status(server, READINESS) == NOT_SERVING

        await wait_for(not_ready, "the loop to probe the failing dependency", timeout_s=5)
        await server.stop(0)
        dependency.state = "up"
        assert await monitor.check_once() is True  # the probe passes again...
        for service in ("", LIVENESS, READINESS, HISTORY):
            assert await status(server, service) == NOT_SERVING  # ...but shutdown is final
    finally:
        stopping.set()
        await asyncio.wait_for(loop, 2)


async def test_the_postgres_probe_asks_through_the_pool(db_pool: asyncpg.Pool) -> None:
    await PostgresProbe(pool=db_pool).check()
