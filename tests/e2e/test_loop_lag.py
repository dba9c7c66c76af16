"""The event-loop watch of a real service process: ``agentfleet_event_loop_lag_seconds``
scraped from its /metrics rises while a handler holds the loop, and the process logs a
warning naming that RPC and the project its request named. The process is the services'
own runtime around a history servicer whose GetRun computes 1.5 s without awaiting
(``tests/e2e/blocking_history.py``)."""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
import pytest_asyncio
from prometheus_client.parser import text_string_to_metric_families

from agentfleet.config import child_environment
from agentfleet.rpc.clients import open_channel
from agentfleet.testing.database import DatabaseFactory
from agentfleet.testing.services import NO_METRICS_PORTS, free_port, wait_serving
from agentfleet.testing.waiting import wait_for
from agentfleet.v1 import history_pb2, history_pb2_grpc
from tests.e2e.blocking_history import HOLD_S

pytestmark = pytest.mark.e2e

LAG = "agentfleet_event_loop_lag_seconds"
WARN_S = 0.4


@dataclass(kw_only=True, slots=True)
class Watched:
    address: str
    metrics_url: str
    log: Path

    async def lag(self) -> dict[str, float]:
        """The lag histogram's count, sum and count of ticks later than 1 s."""
        async with aiohttp.ClientSession() as session, session.get(self.metrics_url) as reply:
            assert reply.status == 200
            text = await reply.text()
        found = {"count": 0.0, "sum": 0.0, "within_1s": 0.0}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == f"{LAG}_count":
                    found["count"] += sample.value
                elif sample.name == f"{LAG}_sum":
                    found["sum"] += sample.value
                elif sample.name == f"{LAG}_bucket" and float(sample.labels["le"]) == 1.0:
                    found["within_1s"] += sample.value
        return found

    def warnings(self) -> list[dict[str, object]]:
        lines = self.log.read_text(errors="replace").splitlines()
        events = [json.loads(line) for line in lines if line.startswith("{")]
        return [e for e in events if e.get("event") == "event loop held"]


@pytest_asyncio.fixture(loop_scope="session")
async def watched(database_factory: DatabaseFactory, tmp_path: Path) -> AsyncIterator[Watched]:
    database_url = await database_factory.create_database()
    port, metrics_port = free_port(), free_port()
    log = tmp_path / "history.log"
    env = {
        **NO_METRICS_PORTS,
        "DATABASE_URL": database_url,
        "AGENTFLEET_AUTH": "off",
        "AGENTFLEET_LOG_FORMAT": "json",
        "AGENTFLEET_HISTORY_PORT": str(port),
        "AGENTFLEET_HISTORY_METRICS_PORT": str(metrics_port),
        "AGENTFLEET_LOOP_LAG_WARN_S": str(WARN_S),
    }
    with log.open("ab") as log_file:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.e2e.blocking_history",
            env=child_environment(env),
            cwd=Path(__file__).resolve().parents[2],
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log_file,
            stderr=log_file,
        )
    try:
        await wait_serving(f"127.0.0.1:{port}", timeout_s=30, process=process)
        yield Watched(
            address=f"127.0.0.1:{port}",
            metrics_url=f"http://127.0.0.1:{metrics_port}/metrics",
            log=log,
        )
    finally:
        process.terminate()
        try:
            await asyncio.wait_for(process.wait(), 10)
        except TimeoutError:
            process.kill()
            await process.wait()
        await database_factory.drop_database(database_url)


async def test_the_lag_metric_rises_and_the_warning_names_the_rpc(watched: Watched) -> None:
    before = await wait_for(
        lambda: _ticking(watched), "the lag histogram to count ticks", timeout_s=10
    )
    async with open_channel(watched.address) as channel:
        history = history_pb2_grpc.HistoryServiceStub(channel)
        started = time.monotonic()
        await history.ListRuns(history_pb2.ListRunsRequest(project_id="bystander"), timeout=5)
        baseline_s = time.monotonic() - started
        heavy = history_pb2.GetRunRequest(project_id="p-heavy", run_id=str(uuid.uuid4()))
        slow = asyncio.ensure_future(history.GetRun(heavy, timeout=30))
        held_s = 0.0
        while not slow.done():  # the bystander's calls while GetRun holds the loop
            started = time.monotonic()
            await history.ListRuns(history_pb2.ListRunsRequest(project_id="bystander"), timeout=30)
            held_s = max(held_s, time.monotonic() - started)
        await slow
    # The bystander waited for the loop: what the metric must show.
    assert held_s > baseline_s + 0.5, (baseline_s, held_s)

    async def risen() -> dict[str, float] | None:
        now = await watched.lag()
        late = (now["count"] - now["within_1s"]) - (before["count"] - before["within_1s"])
        return now if late >= 1 and now["sum"] - before["sum"] >= HOLD_S - 0.3 else None

    await wait_for(risen, "a tick later than 1 s in the lag histogram", timeout_s=10)
    rpc = "rpc /agentfleet.v1.HistoryService/GetRun project p-heavy"

    def named() -> list[dict[str, object]]:
        return [w for w in watched.warnings() if w["held_by"] == rpc]

    (held, *_) = await wait_for(named, "an 'event loop held' warning naming GetRun", timeout_s=10)
    assert float(held["lag_s"]) >= 1.0, held  # type: ignore[arg-type]
    assert rpc in held["in_flight"], held  # type: ignore[operator]
    assert held["level"] == "warning"
    assert held["threshold_s"] == WARN_S


async def _ticking(watched: Watched) -> dict[str, float] | None:
    lag = await watched.lag()
    return lag if lag["count"] >= 3 else None
