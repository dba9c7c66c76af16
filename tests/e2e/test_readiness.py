"""Readiness that tells the truth (issue #18), on real service processes: with PostgreSQL
stopped, readiness goes NOT_SERVING while liveness stays SERVING, and SERVING again once
PostgreSQL is back; an executor whose toolpool is killed is not ready until the toolpool
is back. Waits are on the health answers, with deadlines."""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentfleet.postgres.embedded_pg import EmbeddedPostgres
from agentfleet.postgres.migrate import migrate_up
from agentfleet.rpc.grpc_server import LIVENESS, READINESS
from agentfleet.testing.services import ProcessStack, start_process_stack
from agentfleet.testing.waiting import wait_for

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
LOOPS = {"toolpool": "asyncio", "history": "uvloop"}
API = {"toolpool": "agentfleet.v1.ToolPoolService", "history": "agentfleet.v1.HistoryService"}
ENVIRON = {
    "AGENTFLEET_AUTH": "off",
    "AGENTFLEET_SHUTDOWN_GRACE_S": "2",
    "AGENTFLEET_READINESS_INTERVAL_S": "0.2",
    "AGENTFLEET_READINESS_TIMEOUT_S": "1",
    # No fixed metrics ports: other tests may hold them.
    **{f"AGENTFLEET_{name}_METRICS_PORT": "0" for name in ("TOOLPOOL", "HISTORY", "EXECUTOR")},
}


async def health_of(address: str, service: str) -> int:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        reply = await stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=2)
        return reply.status


async def wait_health(address: str, service: str, status: int, *, timeout_s: float) -> None:
    async def reached() -> bool:
        return await health_of(address, service) == status

    name = health_pb2.HealthCheckResponse.ServingStatus.Name(status)
    await wait_for(reached, f"{address} {service!r} to be {name}", timeout_s=timeout_s)


def logged(stack: ProcessStack, name: str, event: str) -> list[dict[str, Any]]:
    """The JSON log lines of ``event`` written by service ``name``."""
    lines = (json.loads(line) for line in stack.log(name).splitlines() if line.startswith("{"))
    return [line for line in lines if line.get("event") == event]


@pytest.fixture
async def own_postgres() -> AsyncIterator[tuple[EmbeddedPostgres, str]]:
    """A PostgreSQL server of this test alone (it gets stopped), migrated."""
    folder = Path(tempfile.mkdtemp(prefix="af-ready-pg-"))
    server = EmbeddedPostgres(folder / "pg", durable=False)
    try:
        url = await server.start("readiness")
        await migrate_up(url)
        yield server, url
    finally:
        await asyncio.to_thread(server.remove)  # as root the cluster may live outside folder
        shutil.rmtree(folder, ignore_errors=True)


async def test_readiness_follows_postgresql_while_liveness_stays_up(
    own_postgres: tuple[EmbeddedPostgres, str], tmp_path: Path
) -> None:
    server, url = own_postgres
    names = ("toolpool", "history")
    stack = await start_process_stack(
        database_url=url, log_dir=tmp_path, names=names, environ=ENVIRON
    )
    try:
        for name in names:
            await wait_health(stack.addresses[name], READINESS, SERVING, timeout_s=10)
            # uvloop, the default (AGENTFLEET_EVENT_LOOP), but for the toolpool, which
            # starts stdio MCP servers: asyncio's always (run_service).
            (serving,) = logged(stack, name, "serving")
            assert serving["event_loop"] == LOOPS[name], serving

        await asyncio.to_thread(server.stop)
        for name in names:
            address = stack.addresses[name]
            await wait_health(address, READINESS, NOT_SERVING, timeout_s=10)
            # The served API follows readiness; liveness (named, and "") does not.
            assert await health_of(address, API[name]) == NOT_SERVING
            assert await health_of(address, LIVENESS) == SERVING
            assert await health_of(address, "") == SERVING

        await server.start("readiness")
        for name in names:
            await wait_health(stack.addresses[name], READINESS, SERVING, timeout_s=20)
        for name in names:
            # One line when readiness was lost, naming PostgreSQL.
            lost = logged(stack, name, "not_ready")
            assert len(lost) == 1, stack.log(name)[-2000:]
            assert list(lost[0]["failing"]) == ["postgresql"]
            assert lost[0]["level"] == "warning"
    finally:
        codes = await stack.stop(grace_s=10)
    assert codes == dict.fromkeys(names, 0), codes


async def test_executor_is_not_ready_while_its_toolpool_is_down(
    database_url: str, tmp_path: Path
) -> None:
    stack = await start_process_stack(
        database_url=database_url,
        log_dir=tmp_path,
        names=("toolpool", "executor"),
        # The standard library's loop, the other AGENTFLEET_EVENT_LOOP choice.
        environ={**ENVIRON, "AGENTFLEET_EVENT_LOOP": "asyncio"},
    )
    executor = stack.addresses["executor"]
    try:
        await wait_health(executor, READINESS, SERVING, timeout_s=10)
        (serving,) = logged(stack, "executor", "serving")
        assert serving["event_loop"] == "asyncio", serving

        toolpool = stack.processes["toolpool"]
        toolpool.kill()
        await toolpool.wait()
        await wait_health(executor, READINESS, NOT_SERVING, timeout_s=10)
        assert await health_of(executor, "agentfleet.v1.ExecutorService") == NOT_SERVING
        assert await health_of(executor, LIVENESS) == SERVING

        # Again on its old port, with the environment it had.
        await stack.restart(
            "toolpool", {"DATABASE_URL": database_url, "AGENTFLEET_LOG_FORMAT": "json", **ENVIRON}
        )
        await wait_health(executor, READINESS, SERVING, timeout_s=15)
        assert await health_of(executor, "agentfleet.v1.ExecutorService") == SERVING
        # (A first line may come from the start, when the toolpool was not listening yet.)
        lost = logged(stack, "executor", "not_ready")
        assert lost, stack.log("executor")[-2000:]
        assert all(e["failing"].keys() == {"toolpool"} for e in lost), lost
    finally:
        codes = await stack.stop(grace_s=10)
    assert codes == {"toolpool": 0, "executor": 0}, codes
