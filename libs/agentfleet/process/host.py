"""One service as several worker processes on one port: how an executor uses its cores.

A Python process runs on one core. With ``AGENTFLEET_EXECUTOR_PROCESSES`` above 1 (the
default, 0, means the cores this process may use: its CPU affinity, capped by a cgroup CPU
quota), ``python -m services.executor`` becomes a host that runs that many workers, each a
full executor (its own pool, lease owner, crash recovery, queue listener), all serving the
host's gRPC port: each binds it with SO_REUSEPORT and the kernel spreads connections over
them. The host:

* resolves the database once (starting the embedded server when ``DATABASE_URL`` is unset)
  and gives each worker its URL, so the embedded server lives as long as the host, not as
  long as whichever worker happened to start it;
* refuses to start when the port is already bound by anyone (workers share the port with
  each other only: the check is a plain bind before they start);
* keeps the workers running (:mod:`agentfleet.process.supervise`: restart with backoff, a
  crash loop stops the host with exit code 1 so the pod restarts);
* serves the service's ``/metrics`` port itself, each worker's figures labelled
  ``worker="<index>"`` (the workers' own endpoints listen on loopback ports the host picks);
* on SIGTERM or SIGINT passes the signal on, and waits ``AGENTFLEET_SHUTDOWN_GRACE_S`` plus a
  margin for the workers' drains before killing what is left.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import signal
import socket
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import structlog
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from agentfleet.config import Settings
from agentfleet.process.hardening import die_with_parent
from agentfleet.process.stop_signals import stop_event
from agentfleet.process.supervise import CrashLoop, supervise
from agentfleet.rpc.grpc_server import PortInUse

log = structlog.get_logger(__name__)

STOP_MARGIN_S = 10.0
"""Beyond the shutdown grace, the time a worker gets to exit before it is killed."""
SCRAPE_TIMEOUT_S = 5.0


def usable_cores() -> int:
    """The cores this process may run on: its affinity, capped by a cgroup v2 CPU quota."""
    cores = len(os.sched_getaffinity(0))
    with contextlib.suppress(OSError, ValueError):
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()
        if quota != "max":
            cores = min(cores, math.ceil(int(quota) / int(period)))
    return max(1, cores)


def worker_count(settings: Settings) -> int:
    """How many workers an executor runs (AGENTFLEET_EXECUTOR_PROCESSES; 0 = the cores)."""
    return settings.executor_processes or usable_cores()


@dataclass(kw_only=True, slots=True)
class Worker:
    name: str
    index: int
    metrics_port: int
    process: asyncio.subprocess.Process
    log_path: Path = Path("stdout")

    def exit_reason(self) -> str:
        return f"exit code {self.process.returncode}"


async def run_host(name: str, settings: Settings, count: int) -> None:
    """Runs ``count`` workers of service ``name`` until a stop signal (or a crash loop)."""
    from agentfleet.postgres.embedded_pg import resolve_database_url

    port = settings.ports[name]
    _check_port_free(settings.listen_host, port)
    database_url, embedded = await resolve_database_url(settings)
    metrics_port = settings.metrics_ports.get(name, 0)
    # Each worker's own /metrics, on loopback, kept across its restarts.
    worker_ports = [_free_port() if metrics_port else 0 for _ in range(count)]
    workers: list[Worker] = []

    async def spawn(index: int) -> asyncio.subprocess.Process:
        env = {
            **os.environ,
            "DATABASE_URL": database_url,
            f"AGENTFLEET_{name.upper()}_PROCESSES": "1",
            "AGENTFLEET_GRPC_REUSE_PORT": "on",
            f"AGENTFLEET_{name.upper()}_METRICS_PORT": str(worker_ports[index]),
            "AGENTFLEET_WORKER_INDEX": str(index),
        }
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", f"services.{name}", env=env, preexec_fn=die_with_parent
        )

    try:
        for index in range(count):
            workers.append(
                Worker(
                    name=f"{name} worker {index}",
                    index=index,
                    metrics_port=worker_ports[index],
                    process=await spawn(index),
                )
            )
        log.info("host_started", service=name, workers=count, pids=[w.process.pid for w in workers])
        metrics = await _serve_metrics(settings.listen_host, metrics_port, workers)
        try:
            await _supervise_until_stopped(workers, spawn)
        finally:
            if metrics is not None:
                await metrics.cleanup()
    finally:
        await _stop_workers(workers, grace_s=settings.shutdown_grace_s + STOP_MARGIN_S)
        if embedded is not None:
            await asyncio.to_thread(embedded.stop)


async def _supervise_until_stopped(
    workers: list[Worker], spawn: Callable[[int], Awaitable[asyncio.subprocess.Process]]
) -> None:
    stop = stop_event()

    async def respawn(worker_name: str) -> asyncio.subprocess.Process:
        worker = next(w for w in workers if w.name == worker_name)
        return await spawn(worker.index)

    try:
        await supervise(workers, respawn=respawn, stop=stop, say=lambda line: log.warning(line))
    except CrashLoop as exc:
        log.error("host_crash_loop", error=exc.message)
        raise


async def _stop_workers(workers: list[Worker], *, grace_s: float) -> None:
    for worker in workers:
        if worker.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                worker.process.send_signal(signal.SIGTERM)
    for worker in workers:
        try:
            await asyncio.wait_for(worker.process.wait(), grace_s)
        except TimeoutError:
            log.warning("worker_killed", worker=worker.name, after_s=grace_s)
            with contextlib.suppress(ProcessLookupError):
                worker.process.kill()
            await worker.process.wait()


def _check_port_free(host: str, port: int) -> None:
    """A plain bind (no SO_REUSEPORT): fails when any process holds the port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host, port))
        except OSError:
            raise PortInUse(f"cannot listen on {host}:{port}: address already in use") from None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


async def _serve_metrics(host: str, port: int, workers: list[Worker]) -> web.AppRunner | None:
    """The service's /metrics: every worker's, each labelled with its index."""
    if not port:
        return None

    async def scrape(_request: web.Request) -> web.Response:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Merged(await _scrape_all(workers)))
        return web.Response(
            body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    app = web.Application()
    app.router.add_get("/metrics", scrape)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except OSError as exc:
        await runner.cleanup()
        log.warning("metrics endpoint not served", address=f"{host}:{port}", error=str(exc))
        return None
    return runner


async def _scrape_all(workers: list[Worker]) -> list[tuple[int, str]]:
    timeout = aiohttp.ClientTimeout(total=SCRAPE_TIMEOUT_S)
    async with aiohttp.ClientSession(timeout=timeout) as session:

        async def one(worker: Worker) -> tuple[int, str]:
            try:
                url = f"http://127.0.0.1:{worker.metrics_port}/metrics"
                async with session.get(url) as response:
                    return worker.index, await response.text()
            except (aiohttp.ClientError, TimeoutError):
                return worker.index, ""  # restarting: its figures are back next scrape

        return list(await asyncio.gather(*(one(w) for w in workers)))


class _Merged:
    """A collector of the workers' families, each sample labelled with its worker."""

    def __init__(self, texts: list[tuple[int, str]]) -> None:
        self.families: dict[str, Metric] = {}
        for index, text in texts:
            for family in text_string_to_metric_families(text):
                merged = self.families.setdefault(
                    family.name, Metric(family.name, family.documentation, family.type, family.unit)
                )
                for s in family.samples:
                    labels = {**s.labels, "worker": str(index)}
                    merged.samples.append(Sample(s.name, labels, s.value, s.timestamp, s.exemplar))

    def collect(self) -> list[Metric]:
        return list(self.families.values())


def hosts_workers(name: str, settings: Settings) -> int:
    """How many worker processes service ``name`` runs (1: it runs in this process)."""
    return worker_count(settings) if name == "executor" else 1
