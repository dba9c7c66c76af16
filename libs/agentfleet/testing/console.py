"""A console in front of real service processes, for the console's browser and security
tests: toolpool, history, executor and dispatcher with auth on and their own service tokens,
the stub model, and ``python -m services.console`` on a free port."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import httpx

from agentfleet.auth import TokenStore
from agentfleet.gemini_stub import GeminiStub
from agentfleet.postgres import db
from agentfleet.rpc.clients import open_channel
from agentfleet.testing.database import DatabaseFactory
from agentfleet.testing.services import (
    ProcessStack,
    create_service_tokens,
    free_port,
    start_process_stack,
    start_service_process,
    stop_processes,
)
from agentfleet.testing.stdio_allowlist import TEST_SERVER
from agentfleet.testing.waiting import wait_for
from agentfleet.v1 import (
    common_pb2,
    registry_pb2,
    registry_pb2_grpc,
    toolpool_pb2,
    toolpool_pb2_grpc,
)

NAMES = ("toolpool", "history", "executor", "dispatcher")
CHROMIUM = Path("/usr/bin/chromium")
FIREFOX = Path("/usr/lib/firefox-esr/firefox-esr")


@dataclass(kw_only=True, slots=True)
class ConsoleFleet:
    stack: ProcessStack
    stub: GeminiStub
    pool: asyncpg.Pool
    url: str
    console: asyncio.subprocess.Process

    async def project(self, prefix: str, role: str = "admin") -> tuple[str, str]:
        """A new project and a token of ``role`` for it."""
        project_id = f"{prefix}-{uuid.uuid4().hex[:8]}"
        return project_id, await self.token(project_id, role)

    async def token(self, project_id: str, role: str = "admin") -> str:
        created = await TokenStore(self.pool).create(
            project_id=project_id,
            role=role,  # type: ignore[arg-type]
            name="console test",
        )
        return created.token

    async def define(
        self,
        project_id: str,
        token: str,
        name: str,
        *,
        system_prompt: str,
        tools: tuple[str, ...] = (),
        config: dict | None = None,
        visibility: int = common_pb2.VISIBILITY_EXTERNAL,
        trigger: str = "",
    ) -> None:
        definition = common_pb2.AgentDefinition(
            name=name,
            system_prompt=system_prompt,
            model=common_pb2.ModelConfig(name="gemini-e2e"),
            visibility=visibility,  # type: ignore[arg-type]
            tools=list(tools),
            trigger=trigger,
        )
        if config:
            definition.config.update(config)
        async with open_channel(self.stack.addresses["executor"], token=token) as channel:
            await registry_pb2_grpc.AgentRegistryServiceStub(channel).UpsertAgentDefinition(
                registry_pb2.UpsertAgentDefinitionRequest(
                    project_id=project_id, agent_definition=definition
                )
            )

    async def test_mcp_server(self, project_id: str, token: str, name: str = "test") -> None:
        """The example MCP test server (stdio; the harness's allowlist runs it) in the
        project, its tools named ``<name>__echo``, ``<name>__refuse``, ..."""
        server = toolpool_pb2.McpServer(
            name=name,
            transport=toolpool_pb2.MCP_TRANSPORT_STDIO,
            command=sys.executable,
            args=[TEST_SERVER, "--transport", "stdio"],
        )
        async with open_channel(self.stack.addresses["toolpool"], token=token) as channel:
            await toolpool_pb2_grpc.ToolPoolServiceStub(channel).UpsertMcpServer(
                toolpool_pb2.UpsertMcpServerRequest(project_id=project_id, mcp_server=server)
            )


@contextlib.asynccontextmanager
async def console_fleet(
    database_factory: DatabaseFactory, log_dir: Path
) -> AsyncIterator[ConsoleFleet]:
    database_url = await database_factory.create_database()
    pool = await db.create_pool(database_url, min_size=1, max_size=4)
    stub = GeminiStub()
    await stub.start()
    stack = await start_process_stack(
        database_url=database_url,
        log_dir=log_dir,
        environ={
            "AGENTFLEET_GEMINI_BASE_URL": stub.base_url or "",
            "AGENTFLEET_SHUTDOWN_GRACE_S": "3",
        },
        names=NAMES,
        service_tokens=await create_service_tokens(pool, label="console-e2e"),
    )
    port = free_port()
    env = {
        "AGENTFLEET_LOG_FORMAT": "json",
        "AGENTFLEET_CONSOLE_PORT": str(port),
        # The console gets addresses only: no DATABASE_URL, no service token.
        **{f"AGENTFLEET_{n.upper()}_ADDR": a for n, a in stack.addresses.items()},
    }
    console = await start_service_process("console", env, log_dir / "console.log")
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient() as http:

            async def up() -> bool:
                if console.returncode is not None:
                    raise AssertionError((log_dir / "console.log").read_text())
                return (await http.get(f"{url}/healthz")).status_code == 200

            await wait_for(up, "the console's /healthz", transient=(httpx.TransportError,))
        yield ConsoleFleet(stack=stack, stub=stub, pool=pool, url=url, console=console)
    finally:
        console_code = (await stop_processes({"console": console}, grace_s=10.0))["console"]
        codes = await stack.stop(grace_s=15.0)
        await stub.stop()
        await pool.close()
        await database_factory.drop_database(database_url)
        assert console_code == 0, (log_dir / "console.log").read_text()[-2000:]
        assert all(code == 0 for code in codes.values()), codes


def chromium_path() -> Path | str:
    """Debian's chromium, installed here when missing and this runs as root; otherwise a
    reason to skip (a string)."""
    return debian_browser(CHROMIUM, "chromium")


def firefox_path() -> Path | str:
    """Debian's Firefox ESR (``make browser`` installs it beside chromium), as
    :func:`chromium_path`."""
    return debian_browser(FIREFOX, "firefox-esr")


def debian_browser(binary: Path, package: str) -> Path | str:
    """``binary`` from Debian's ``package``, installed with apt-get when missing and this runs
    as root; otherwise why it cannot be had (a string: the tests that need it skip)."""
    if binary.exists():
        return binary
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return f"{package} is not installed ({binary}) and cannot be: not root or no apt"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", package]):
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            return f"apt-get could not install {package}: {done.stderr.strip()[-300:]}"
    return binary if binary.exists() else f"apt-get ran but {binary} is missing"
