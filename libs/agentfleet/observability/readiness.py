"""Readiness that tells the truth: is the service able to do its work right now?

A :class:`ReadinessMonitor` probes what a service needs on a short interval, each probe
bounded by a timeout: PostgreSQL through the service's own pool (``SELECT 1``), and for a
service that calls another (the executor calls the toolpool) that service's health. While
any probe fails the server's readiness goes NOT_SERVING; once all pass it is SERVING
again. Liveness is not touched: a process waiting for its database is alive, and
restarting it would not bring the database back.

One line is logged per change (which dependency failed and why), not one per probe.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import asyncpg
import grpc
import structlog
from grpc_health.v1 import health_pb2, health_pb2_grpc

log = structlog.get_logger(__name__)


class DependencyProbe(Protocol):
    name: str
    """What is probed, as logged: ``postgresql``, ``toolpool``."""

    async def check(self) -> None:
        """Returns when the dependency answers; raises otherwise."""
        ...


@dataclass(frozen=True, kw_only=True, slots=True)
class PostgresProbe:
    """``SELECT 1`` through the pool: the connections the service itself would use."""

    pool: asyncpg.Pool
    name: str = "postgresql"

    async def check(self) -> None:
        await self.pool.fetchval("SELECT 1")


class NotServing(Exception):
    """A health check answered, but not SERVING."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ServiceHealthProbe:
    """The overall health (``""``) of a service this one calls, over ``channel``."""

    name: str
    channel: grpc.aio.Channel

    async def check(self) -> None:
        stub = health_pb2_grpc.HealthStub(self.channel)
        reply = await stub.Check(health_pb2.HealthCheckRequest(service=""))
        if reply.status != health_pb2.HealthCheckResponse.SERVING:
            status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
            raise NotServing(f"health is {status}")


class ReadinessMonitor:
    """Runs the probes and reports readiness through ``set_ready`` when it changes."""

    def __init__(
        self,
        *,
        probes: Sequence[DependencyProbe],
        set_ready: Callable[[bool], Awaitable[None]],
        interval_s: float,
        timeout_s: float,
    ) -> None:
        self._probes = tuple(probes)
        self._set_ready = set_ready
        self._interval_s = interval_s
        self._timeout_s = timeout_s
        self._ready: bool | None = None

    @property
    def ready(self) -> bool | None:
        """The last verdict; None before the first check."""
        return self._ready

    async def check_once(self) -> bool:
        """Probes everything at once; reports and logs the verdict if it changed."""
        failures = await asyncio.gather(*(self._failure(probe) for probe in self._probes))
        failing = {p.name: f for p, f in zip(self._probes, failures, strict=True) if f}
        ready = not failing
        if ready != self._ready:
            if ready:
                log.info("ready", dependencies=[p.name for p in self._probes])
            else:
                log.warning("not_ready", failing=failing)
            self._ready = ready
            await self._set_ready(ready)
        return ready

    async def run(self, stopping: asyncio.Event) -> None:
        """Checks every interval until ``stopping`` is set (it interrupts the wait)."""
        while not stopping.is_set():
            await self.check_once()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), self._interval_s)

    async def _failure(self, probe: DependencyProbe) -> str | None:
        """Why ``probe`` failed (``Type: message``), or None when it passed."""
        try:
            async with asyncio.timeout(self._timeout_s):
                await probe.check()
        except TimeoutError:
            return f"no answer within {self._timeout_s:g}s"
        except grpc.aio.AioRpcError as exc:
            return f"{exc.code().name}: {exc.details()}"
        except Exception as exc:  # any failure of a probe means "not ready", never a crash
            return f"{type(exc).__name__}: {exc}"
        return None
