"""An executor that uses its cores (AGENTFLEET_EXECUTOR_PROCESSES): one ``python -m
services.executor`` hosting two worker processes on one port, each a full executor.

Shown on real processes: both workers claim runs from the one queue and every run completes;
the host's /metrics carries each worker's figures labelled by worker; a worker killed with
SIGKILL is started again and its runs are taken over; SIGTERM to the host stops both workers
and the host exits 0; a port already in use is refused before any worker starts.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import asyncpg
import pytest

from agentfleet.gemini_stub import GeminiStub, Reply, Script
from agentfleet.testing.services import ProcessStack, free_port, start_process_stack
from agentfleet.testing.waiting import wait_for, wait_for_query
from services.executor.queue import RunQueue
from services.executor.registry.definitions import AgentDefinition, DefinitionRepository
from services.executor.registry.model_config import ModelConfig
from services.executor.runs import StartRunParams
from tests.e2e.lone_executor import NoTools, serve_toolpool

PROJECT = "host"
RUNS = 12


@pytest.fixture
async def toolpool_addr() -> AsyncIterator[str]:
    async with serve_toolpool(NoTools()) as address:
        yield address


def children_of(pid: int) -> set[int]:
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.add(int(entry.name))
    return found


async def enqueue_runs(pool: asyncpg.Pool, n: int) -> list[str]:
    await DefinitionRepository(pool).upsert(
        PROJECT,
        AgentDefinition(name="agent", system_prompt="You are agent.", model=ModelConfig(name="m")),
    )
    queue = RunQueue(pool)
    ids = []
    for _ in range(n):
        run, _ = await queue.enqueue(
            StartRunParams(
                project_id=PROJECT, agent_name="agent", agent_definition_id=None, input="go"
            )
        )
        ids.append(run.id)
    return ids


async def start_host(
    database_url: str, tmp_path: Path, stub: GeminiStub, toolpool_addr: str, metrics_port: int
) -> ProcessStack:
    """An executor host of two workers (two interpreters starting at once: a generous wait)."""
    return await start_process_stack(
        database_url=database_url,
        log_dir=tmp_path,
        names=("executor",),
        timeout_s=90,
        environ={
            "AGENTFLEET_AUTH": "off",
            "AGENTFLEET_GEMINI_BASE_URL": stub.base_url or "",
            "AGENTFLEET_TOOLPOOL_ADDR": toolpool_addr,
            "AGENTFLEET_EXECUTOR_LEASE_S": "1.5",
            "AGENTFLEET_EXECUTOR_HEARTBEAT_S": "0.3",
            "AGENTFLEET_EXECUTOR_PROCESSES": "2",
            "AGENTFLEET_EXECUTOR_METRICS_PORT": str(metrics_port),
            "AGENTFLEET_EXECUTOR_CONCURRENCY": "4",
            "AGENTFLEET_SHUTDOWN_GRACE_S": "3",
        },
    )


async def test_two_workers_share_the_queue_the_port_and_the_metrics(
    database_url: str,
    db_pool: asyncpg.Pool,
    gemini_stub: GeminiStub,
    toolpool_addr: str,
    tmp_path: Path,
) -> None:
    gemini_stub.add_script(Script(name="agent", replies=[Reply(text="done", delay_s=0.4)] * RUNS))
    metrics_port = free_port()
    stack = await start_host(database_url, tmp_path, gemini_stub, toolpool_addr, metrics_port)
    host = stack.processes["executor"]
    try:
        workers = await wait_for(
            lambda: (lambda found: found if len(found) == 2 else None)(children_of(host.pid)),
            "the host to run two workers",
            timeout_s=60,
        )
        ids = await enqueue_runs(db_pool, RUNS)
        owners: set[int] = set()

        async def both_workers_leased() -> bool:
            rows = await db_pool.fetch(
                "SELECT lease_owner FROM kb.agent_runs WHERE lease_owner IS NOT NULL"
            )
            owners.update(int(r["lease_owner"].split(":")[1]) for r in rows)
            return owners == workers

        await wait_for(both_workers_leased, "runs leased by both workers", timeout_s=60)
        try:
            await wait_for_query(
                db_pool,
                "SELECT count(*) = $2 FROM kb.agent_runs WHERE id = ANY($1::uuid[])"
                " AND status = 'completed'",
                ids,
                RUNS,
                timeout_s=120,
                what="every run completed",
            )
        except AssertionError:
            rows = await db_pool.fetch(
                "SELECT status, error FROM kb.agent_runs WHERE id = ANY($1::uuid[])", ids
            )
            raise AssertionError(f"runs: {[dict(r) for r in rows]}") from None

        async with aiohttp.ClientSession() as session:

            async def scraped() -> str | None:
                async with session.get(f"http://127.0.0.1:{metrics_port}/metrics") as response:
                    text = await response.text()
                return text if 'worker="0"' in text and 'worker="1"' in text else None

            text = await wait_for(
                scraped, "both workers' figures", timeout_s=20, transient=(aiohttp.ClientError,)
            )
        assert text.count("# TYPE agentfleet_event_loop_lag_seconds ") == 1, "one family each"

        # A worker killed outright is started again, on the same port.
        victim = min(workers)
        os.kill(victim, signal.SIGKILL)
        await wait_for(
            lambda: (lambda found: found if len(found) == 2 and victim not in found else None)(
                children_of(host.pid)
            ),
            "the killed worker replaced",
            timeout_s=60,
        )
        assert "restarting" in stack.log("executor")

        # SIGTERM to the host stops the workers too, and the host exits cleanly.
        running = children_of(host.pid)
        codes = await stack.stop(grace_s=30)
        assert codes["executor"] == 0, stack.log("executor")[-3000:]
        assert not any(Path(f"/proc/{pid}").exists() for pid in running)
    finally:
        if host.returncode is None:
            await stack.stop(grace_s=5)


async def test_a_port_in_use_is_refused_before_any_worker_starts(
    database_url: str, tmp_path: Path
) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "services.executor",
            env={
                **os.environ,
                "DATABASE_URL": database_url,
                "AGENTFLEET_EXECUTOR_PROCESSES": "2",
                "AGENTFLEET_EXECUTOR_PORT": str(port),
                "AGENTFLEET_EXECUTOR_METRICS_PORT": "0",
            },
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        _, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 1
    assert (
        f"cannot listen on 0.0.0.0:{port}" in err.decode()
        or "address already in use" in err.decode()
    )
