"""The soak (issue 10, item 4; ``make soak``): AGENTFLEET_SOAK_RUNS runs (default 2,000) on
real processes -- a toolpool with a stdio MCP server holding a project secret, two executors
and a dispatcher -- mixing plain runs, spawns, model failures, cancels, timeouts, runs that
read the secret, and the seed 002 DAG, with executor-a SIGKILLed and restarted half-way.

Afterwards: the database invariants hold; every run is terminal or paused; no run holds a
lease; no MCP server process outlives the services, and there was one MCP session (one
server process) for the whole soak; the secret value is in no log line.
"""

from __future__ import annotations

import asyncio
import collections
import os
import secrets
import time
from collections.abc import Sequence
from pathlib import Path

import asyncpg
import pytest

from agentfleet.dagfile import load_dag_file
from agentfleet.gemini_stub import Call, GeminiStub, Reply, Script, StubRequest
from agentfleet.postgres import db
from agentfleet.rpc.clients import open_channel
from agentfleet.testing.checks.invariants import assert_invariants
from agentfleet.testing.database import DatabaseFactory
from agentfleet.testing.services import (
    TEST_EGRESS_AND_SECRETS,
    free_port,
    start_service_process,
    stop_processes,
    wait_serving,
)
from agentfleet.testing.stdio_allowlist import TEST_STDIO_ALLOWLIST
from agentfleet.testing.waiting import DATABASE_RESTARTING, wait_for_query
from agentfleet.v1 import (
    dispatcher_pb2,
    dispatcher_pb2_grpc,
    executor_pb2,
    executor_pb2_grpc,
    toolpool_pb2,
    toolpool_pb2_grpc,
)
from services.executor.registry.definitions import AgentDefinition, DefinitionRepository
from services.executor.registry.model_config import ModelConfig
from tests.e2e.test_faults import (
    ENDED,
    mcp_server,
    processes_with,
    wait_no_processes,
)

pytestmark = pytest.mark.soak

PROJECT = "soak"
SEED = Path(__file__).parents[2] / "examples" / "dags" / "seed002.yaml"
SERVICES = {"toolpool": "toolpool", "executor-a": "executor", "executor-b": "executor"}
KINDS = ["spawner"] + ["failer"] * 2 + ["canceller"] * 2 + ["timer"] + ["secret"] + ["plain"] * 13
"""One submitted run in twenty of each kind (a spawner starts two children more)."""
WINDOW = 60
"""Runs submitted at once; the next batch waits until fewer than this are open."""


def prompt(agent: str) -> str:
    return f"You are {agent}."


def scripts() -> list[Script]:
    def spawner(request: StubRequest) -> Reply:
        if request.turn == 0:
            tasks = [{"agent_name": "child", "prompt": f"part {i}"} for i in range(2)]
            return Reply(calls=[Call("spawn_agents", {"tasks": tasks})])
        return Reply(text="children done")

    def plain(request: StubRequest) -> Reply:
        if request.turn == 0:
            return Reply(calls=[Call("test__echo", {"text": request.last_user_text() or ""})])
        return Reply(text="echoed")

    def secret(request: StubRequest) -> Reply:
        if request.turn == 0:
            return Reply(calls=[Call("test__env", {"name": "SOAK_TOKEN"})])
        return Reply(text="read the token")

    def canceller(request: StubRequest) -> Reply:
        return Reply(calls=[Call("test__slow", {"seconds": 60})])

    policies = {
        "spawner": spawner,
        "plain": plain,
        "secret": secret,
        "canceller": canceller,
        "child": lambda _: Reply(text="child done", delay_s=0.05),
        "failer": lambda _: Reply(error_status=500, error_message="soak backend down"),
        "timer": lambda _: Reply(hang=True),
        "dag": lambda _: Reply(text="task done", delay_s=0.05),
    }
    return [Script(name=n, match_system=prompt(n), policy=p) for n, p in policies.items()]


async def define(pool: asyncpg.Pool) -> None:
    tools = {
        "spawner": ["spawn_agents"],
        "plain": ["test__echo"],
        "secret": ["test__env"],
        "canceller": ["test__slow"],
    }
    repository = DefinitionRepository(pool)
    for name in ("spawner", "plain", "secret", "canceller", "child", "failer", "timer"):
        await repository.upsert(
            PROJECT,
            AgentDefinition(
                name=name,
                system_prompt=prompt(name),
                model=ModelConfig(name="m"),
                tools=tools.get(name, []),
            ),
        )
    # The DAG's tasks go to any agent; one default agent answers them all.
    await repository.upsert(
        PROJECT,
        AgentDefinition(
            name="dag", system_prompt=prompt("dag"), model=ModelConfig(name="m"), is_default=True
        ),
    )


class Fleet:
    """The soak's processes; each can be killed and started again on its port."""

    def __init__(self, env: dict[str, str], log_dir: Path) -> None:
        self.env = env
        self.log_dir = log_dir
        self.ports = {name: free_port() for name in (*SERVICES, "dispatcher")}
        self.processes: dict[str, asyncio.subprocess.Process] = {}

    def address(self, name: str) -> str:
        return f"127.0.0.1:{self.ports[name]}"

    async def start(self, names: Sequence[str]) -> None:
        for name in names:
            service = SERVICES.get(name, name)
            env = {
                **self.env,
                "AGENTFLEET_TOOLPOOL_ADDR": self.address("toolpool"),
                "AGENTFLEET_EXECUTOR_ADDR": self.address(
                    name if service == "executor" else "executor-b"
                ),
                f"AGENTFLEET_{service.upper()}_PORT": str(self.ports[name]),
            }
            self.processes[name] = await start_service_process(
                service, env, self.log_dir / f"{name}.log"
            )
        await asyncio.gather(
            *(wait_serving(self.address(n), timeout_s=60, process=self.processes[n]) for n in names)
        )

    async def kill(self, name: str) -> None:
        self.processes[name].kill()
        await self.processes[name].wait()

    async def stop(self) -> dict[str, int]:
        return await stop_processes(self.processes, grace_s=20)


@pytest.mark.timeout(900)
async def test_soak(
    database_factory: DatabaseFactory, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if "soak" not in (request.config.option.markexpr or ""):
        pytest.skip("the soak runs with -m soak (make soak)")
    total = int(os.environ.get("AGENTFLEET_SOAK_RUNS", "2000"))
    database_url = await database_factory.create_database()
    pool = await db.create_pool(database_url, min_size=1, max_size=8)
    stub = GeminiStub()
    await stub.start()
    for script in scripts():
        stub.add_script(script)
    secret_value = f"soak-secret-{secrets.token_hex(12)}"
    marker = secrets.token_hex(8)
    fleet = Fleet(
        {
            "DATABASE_URL": database_url,
            "AGENTFLEET_LOG_FORMAT": "json",
            "AGENTFLEET_AUTH": "off",
            "AGENTFLEET_GEMINI_BASE_URL": stub.base_url or "",
            "AGENTFLEET_MCP_STDIO_ALLOWLIST": TEST_STDIO_ALLOWLIST,
            **TEST_EGRESS_AND_SECRETS,
            "AGENTFLEET_EXECUTOR_CONCURRENCY": "32",
            "AGENTFLEET_EXECUTOR_LEASE_S": "3",
            "AGENTFLEET_EXECUTOR_HEARTBEAT_S": "0.5",
            "AGENTFLEET_SHUTDOWN_GRACE_S": "5",
            "AGENTFLEET_MODEL_MAX_ATTEMPTS": "2",
            "AGENTFLEET_MODEL_RETRY_BASE_S": "0.01",
            "AGENTFLEET_TIMEOUT_GRACE_S": "1",
            "AGENTFLEET_DB_POOL_MAX": "20",
        },
        tmp_path,
    )
    channels = []
    try:
        await fleet.start(["toolpool", "executor-a", "executor-b", "dispatcher"])
        channels = [
            open_channel(fleet.address(n)) for n in ("toolpool", "executor-b", "dispatcher")
        ]
        toolpool = toolpool_pb2_grpc.ToolPoolServiceStub(channels[0])
        runs = executor_pb2_grpc.ExecutorServiceStub(channels[1])
        dags = dispatcher_pb2_grpc.DispatcherServiceStub(channels[2])
        await toolpool.SetSecret(
            toolpool_pb2.SetSecretRequest(project_id=PROJECT, name="SOAK_TOKEN", value=secret_value)
        )
        server = mcp_server("test", marker)
        server.env["SOAK_TOKEN"] = "${SOAK_TOKEN}"
        await toolpool.UpsertMcpServer(
            toolpool_pb2.UpsertMcpServerRequest(project_id=PROJECT, mcp_server=server)
        )
        await define(pool)

        began = time.monotonic()
        graph = await dags.CreateTaskGraph(load_dag_file(SEED, project_id=PROJECT))
        cancels: list[asyncio.Task[None]] = []
        gate = asyncio.Semaphore(16)
        killed = asyncio.Event()

        async def submit(i: int) -> str:
            kind = KINDS[i % len(KINDS)]
            request = executor_pb2.StartRunRequest(
                project_id=PROJECT, agent_name=kind, input=f"{kind} {i}"
            )
            if kind == "timer":
                request.timeout.seconds = 1
            async with gate:
                run = await runs.TriggerRun(request)
            if kind == "canceller":
                cancels.append(asyncio.create_task(cancel(run.id, wait_running=i % 2 == 0)))
            return run.id

        async def cancel(run_id: str, *, wait_running: bool) -> None:
            if wait_running:
                await wait_for_query(
                    pool,
                    "SELECT status <> 'queued' FROM kb.agent_runs WHERE id = $1",
                    run_id,
                    timeout_s=120,
                    transient=DATABASE_RESTARTING,
                )
            await runs.CancelRun(
                executor_pb2.CancelRunRequest(project_id=PROJECT, run_id=run_id, reason="soak")
            )

        async def kill_half_way() -> None:
            await wait_for_query(
                pool,
                "SELECT count(*) >= $1 FROM kb.agent_runs WHERE project_id = $2 "
                "AND status IN ('completed', 'failed', 'cancelled', 'paused')",
                total // 2,
                PROJECT,
                timeout_s=300,
                transient=DATABASE_RESTARTING,
            )
            await fleet.kill("executor-a")
            killed.set()
            await fleet.start(["executor-a"])

        killer = asyncio.create_task(kill_half_way())
        submitted: list[str] = []
        # Batches of WINDOW, the next once fewer than WINDOW runs are open: a steady load
        # near the executors' 64 slots rather than one queue 2,000 deep.
        for start in range(0, total, WINDOW):
            await wait_for_query(
                pool,
                "SELECT count(*) < $1 FROM kb.agent_runs WHERE project_id = $2 "
                "AND status IN ('queued', 'running')",
                WINDOW,
                PROJECT,
                timeout_s=120,
                what="the open runs to drain below the window",
                transient=DATABASE_RESTARTING,
            )
            batch = range(start, min(start + WINDOW, total))
            submitted += await asyncio.gather(*(submit(i) for i in batch))
        await killer
        await asyncio.gather(*cancels)
        await wait_for_query(
            pool,
            "SELECT count(*) = 0 FROM kb.agent_runs WHERE project_id = $1 "
            "AND NOT status = ANY($2::text[])",
            PROJECT,
            list(ENDED),
            timeout_s=300,
            what="every run ended",
            transient=DATABASE_RESTARTING,
        )
        get_graph = dispatcher_pb2.GetTaskGraphRequest(
            project_id=PROJECT, task_graph_id=graph.task_graph.id
        )
        async with asyncio.timeout(120):
            while True:
                graph_status = (await dags.GetTaskGraph(get_graph)).task_graph.status
                if graph_status != dispatcher_pb2.TASK_GRAPH_STATUS_ACTIVE:
                    break
                await asyncio.sleep(0.2)
        elapsed = time.monotonic() - began
        rows = await pool.fetch(
            "SELECT agent_name, status, count(*) FROM kb.agent_runs WHERE project_id = $1 "
            "GROUP BY 1, 2 ORDER BY 1, 2",
            PROJECT,
        )
        count = sum(r["count"] for r in rows)
        print(
            f"\nsoak: {len(submitted)} runs submitted, {count} runs in all, {elapsed:.1f} s, "
            f"{count / elapsed:.1f} runs/s"
        )
        for r in rows:
            print(f"  {r['agent_name']:<10} {r['status']:<10} {r['count']}")
        mcp_processes = processes_with(marker)
    finally:
        for channel in channels:
            await channel.close()
        codes = await fleet.stop()
        await stub.stop()

    try:
        assert killed.is_set()
        assert codes == dict.fromkeys(fleet.processes, 0), codes
        await wait_no_processes(marker)
        # One shared MCP session for every call of the soak: no session leaked per call.
        assert len(mcp_processes) == 1, mcp_processes
        assert graph_status == dispatcher_pb2.TASK_GRAPH_STATUS_COMPLETED
        by = collections.Counter({(r["agent_name"], r["status"]): r["count"] for r in rows})
        expected = collections.Counter(KINDS[i % len(KINDS)] for i in range(total))
        unexpected = await pool.fetch(
            "SELECT agent_name, error_message, count(*) FROM kb.agent_runs "
            "WHERE project_id = $1 AND status = 'failed' AND agent_name <> 'failer' "
            "GROUP BY 1, 2 ORDER BY 3 DESC LIMIT 10",
            PROJECT,
        )
        by_error = [(r["agent_name"], r["error_message"], r["count"]) for r in unexpected]
        assert not by_error, (by, by_error)
        assert by["plain", "completed"] == expected["plain"], by
        assert by["secret", "completed"] == expected["secret"], by
        assert by["failer", "failed"] == expected["failer"], by
        assert by["canceller", "cancelled"] == expected["canceller"], by
        assert by["timer", "paused"] == expected["timer"], by
        assert by["spawner", "completed"] == expected["spawner"], by
        assert by["child", "completed"] == 2 * expected["spawner"], by
        # The executor killed half-way left runs that the others took over.
        recovered = await pool.fetchval(
            "SELECT count(*) FROM kb.agent_run_events e JOIN kb.agent_runs r ON r.id = e.run_id "
            "WHERE r.project_id = $1 AND e.type = 'run_started' "
            "AND (e.payload->>'recovered')::boolean",
            PROJECT,
        )
        print(f"  runs recovered after the kill: {recovered}")
        await assert_invariants(pool, project_id=PROJECT)
        leased = await pool.fetchval(
            "SELECT count(*) FROM kb.agent_runs WHERE project_id = $1 AND lease_owner IS NOT NULL",
            PROJECT,
        )
        assert leased == 0
        # The secret reached the MCP server (the runs that read it got it; a call cut off
        # by the kill is ``interrupted`` and has no output) ...
        reads = await pool.fetch(
            "SELECT t.status, strpos(t.output::text, $2) > 0 AS has_secret "
            "FROM kb.agent_run_tool_calls t JOIN kb.agent_runs r ON r.id = t.run_id "
            "WHERE r.project_id = $1 AND t.tool_name = 'test__env'",
            PROJECT,
            secret_value,
        )
        outcomes = collections.Counter((r["status"], r["has_secret"]) for r in reads)
        assert set(outcomes) <= {("completed", True), ("interrupted", False)}, outcomes
        assert outcomes["completed", True] >= expected["secret"] * 0.9, outcomes
        # ... and into no log line of any service.
        for log in tmp_path.glob("*.log"):
            leaked = [line for line in log.read_text().splitlines() if secret_value in line]
            assert not leaked, f"{log.name}: {leaked[:3]}"
    finally:
        await pool.close()
        await database_factory.drop_database(database_url)
