"""pytest fixtures for the services: in-process gRPC servers, and real service processes.

``stack`` starts all four services in the test's event loop on free loopback ports against
the test's own database, with auth on and one service token per service (each presents its
own, see :func:`create_service_tokens`).
``process_stack`` starts them as real ``python -m services.<name>`` processes instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import socket
import sys
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentfleet.auth import TokenStore
from agentfleet.config import SERVICE_NAMES, Settings, child_environment, load_settings
from agentfleet.gemini_stub import GeminiStub
from agentfleet.process.service_runtime import RunningService, start_service
from agentfleet.rpc.clients import open_channel
from agentfleet.rpc.tls import ClientTls, client_tls
from agentfleet.secrets.secrets_crypto import new_key_entry
from agentfleet.testing.stdio_allowlist import TEST_STDIO_ALLOWLIST
from agentfleet.testing.waiting import wait_for
from agentfleet.v1 import toolpool_pb2_grpc

CORE_SERVICES = ("toolpool", "history", "executor", "dispatcher")
"""What a test stack starts unless it names services: the a2a service only when asked."""
START_ORDER = (*CORE_SERVICES, "a2a")
# Test MCP servers listen on 127.0.0.1; secrets need a key (one per test session).
TEST_EGRESS_AND_SECRETS = {
    "AGENTFLEET_MCP_ALLOWED_NETWORKS": "127.0.0.1/32",
    "AGENTFLEET_SECRETS_KEYS": new_key_entry("test-1"),
}


def free_port() -> int:
    """A port that was free a moment ago (the OS may hand it out again; good enough here)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_settings(**environ: str) -> Settings:
    """Settings from an explicit environment only, so the developer's shell never leaks in."""
    return load_settings(
        {
            "AGENTFLEET_LOG_FORMAT": "console",
            "AGENTFLEET_MCP_STDIO_ALLOWLIST": TEST_STDIO_ALLOWLIST,
            **TEST_EGRESS_AND_SECRETS,
            **environ,
        }
    )


@dataclass(kw_only=True, slots=True)
class Stack:
    """Running services and the means to call them."""

    settings: Settings
    pool: asyncpg.Pool
    services: dict[str, RunningService] = field(default_factory=dict)
    service_tokens: dict[str, str] = field(default_factory=dict)
    """Each service's own token (service name -> token), when the stack made them."""
    _channels: list[grpc.aio.Channel] = field(default_factory=list)

    def address(self, name: str) -> str:
        return self.settings.addresses[name]

    def channel(self, name: str, *, token: str | None = None) -> grpc.aio.Channel:
        """A channel to a service; closed when the stack stops."""
        channel = open_channel(self.address(name), token=token, tls=client_tls(self.settings))
        self._channels.append(channel)
        return channel

    async def create_token(self, project_id: str | None, role: str = "admin") -> str:
        created = await TokenStore(self.pool).create(
            project_id=project_id,
            role=role,  # type: ignore[arg-type]
            name="test",
        )
        return created.token

    async def toolpool_as(
        self, project_id: str, role: str = "admin"
    ) -> toolpool_pb2_grpc.ToolPoolServiceStub:
        """The toolpool as a new token of ``role`` in ``project_id`` calls it."""
        token = await self.create_token(project_id, role)
        return toolpool_pb2_grpc.ToolPoolServiceStub(self.channel("toolpool", token=token))

    async def close(self) -> None:
        for channel in self._channels:
            await channel.close()
        for name in reversed(START_ORDER):
            if name in self.services:
                await self.services[name].stop(grace_s=1.0)


async def create_service_tokens(
    pool: asyncpg.Pool, names: tuple[str, ...] = SERVICE_NAMES, *, label: str = "test"
) -> dict[str, str]:
    """One service token per named service: service name -> token."""
    store = TokenStore(pool)
    tokens = {}
    for name in names:
        created = await store.create(project_id=None, role="service", service=name, name=label)
        tokens[name] = created.token
    return tokens


async def start_stack(
    *,
    database_url: str,
    pool: asyncpg.Pool,
    environ: Mapping[str, str] | None = None,
    names: tuple[str, ...] = CORE_SERVICES,
    service_environ: Mapping[str, Mapping[str, str]] | None = None,
) -> Stack:
    """Starts the named services in-process, in dependency order, on free ports.

    ``service_environ`` adds variables for one service only (e.g. its own
    AGENTFLEET_SERVICE_TOKEN_FILE); a service given no token of its own gets one made here.
    """
    settings = test_settings(DATABASE_URL=database_url, **dict(environ or {}))
    stack = Stack(settings=settings, pool=pool)
    if settings.auth_enabled and settings.service_token is None:
        stack.service_tokens = await create_service_tokens(pool)
    try:
        for name in names:
            own = test_settings(
                DATABASE_URL=database_url,
                **dict(environ or {}),
                **dict((service_environ or {}).get(name, {})),
            )
            if own.auth_enabled and own.service_token is None and own.service_token_file is None:
                own = own.with_overrides(service_token=stack.service_tokens[name])
            build = importlib.import_module(f"services.{name}.server").build
            service = await start_service(
                name,
                build,
                settings=own.with_overrides(addresses=settings.addresses),
                pool=pool,
                database_url=database_url,
                port=0,
            )
            stack.services[name] = service
            addresses = {**settings.addresses, name: f"127.0.0.1:{service.port}"}
            settings = settings.with_overrides(addresses=addresses)
            stack.settings = settings
            # Later services read the addresses of earlier ones from their settings.
            for running in stack.services.values():
                running.context.settings = running.context.settings.with_overrides(
                    addresses=addresses
                )
    except BaseException:
        await stack.close()
        raise
    return stack


@contextlib.asynccontextmanager
async def toolpool_only(
    database_url: str, pool: asyncpg.Pool, environ: Mapping[str, str] | None = None
) -> AsyncIterator[Stack]:
    """The toolpool alone, in-process, auth on; stopped when the block ends."""
    running = await start_stack(
        database_url=database_url, pool=pool, names=("toolpool",), environ=environ
    )
    try:
        yield running
    finally:
        await running.close()


@pytest.fixture
async def stack(database_url: str, db_pool: asyncpg.Pool) -> AsyncIterator[Stack]:
    """All four services in-process against this test's database, auth on."""
    running = await start_stack(database_url=database_url, pool=db_pool)
    try:
        yield running
    finally:
        await running.close()


@pytest.fixture
async def stub_stack(
    database_url: str, db_pool: asyncpg.Pool, gemini_stub: GeminiStub
) -> AsyncIterator[Stack]:
    """All four services in-process, auth on, their model the test's stub Gemini server."""
    running = await start_stack(
        database_url=database_url,
        pool=db_pool,
        environ={"AGENTFLEET_GEMINI_BASE_URL": gemini_stub.base_url or ""},
    )
    try:
        yield running
    finally:
        await running.close()


@dataclass(kw_only=True, slots=True)
class ProcessStack:
    """Services running as real processes."""

    addresses: dict[str, str]
    processes: dict[str, asyncio.subprocess.Process]
    log_dir: Path
    a2a_url: str = ""
    """The a2a service's HTTP base URL, when it runs."""

    def log(self, name: str) -> str:
        return (self.log_dir / f"{name}.log").read_text(errors="replace")

    async def stop(self, grace_s: float = 10.0) -> dict[str, int]:
        """SIGTERM to every process; returns exit codes (killed ones included)."""
        return await stop_processes(self.processes, grace_s=grace_s)

    async def restart(self, name: str, environ: Mapping[str, str]) -> None:
        """Starts ``name`` again on its old port, with ``environ`` and every service's port
        and address, and waits until it serves."""
        env = dict(environ)
        for service, address in self.addresses.items():
            env[f"AGENTFLEET_{service.upper()}_PORT"] = address.rsplit(":", 1)[1]
            env[f"AGENTFLEET_{service.upper()}_ADDR"] = address
        self.processes[name] = await start_service_process(name, env, self.log_dir / f"{name}.log")
        await wait_serving(self.addresses[name], timeout_s=30, process=self.processes[name])


async def start_service_process(
    service: str, env: Mapping[str, str], log_path: Path
) -> asyncio.subprocess.Process:
    """``python -m services.<service>`` with ``env`` (as :func:`child_environment` passes
    it on), its stdout and stderr appended to ``log_path``."""
    with log_path.open("ab") as log_file:
        return await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            f"services.{service}",
            env=child_environment(dict(env)),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log_file,
            stderr=log_file,
        )


async def stop_processes(
    processes: Mapping[str, asyncio.subprocess.Process], *, grace_s: float
) -> dict[str, int]:
    """SIGTERM to every process still running; each that has not exited after ``grace_s`` is
    killed. Returns the exit codes by name."""
    for process in processes.values():
        if process.returncode is None:
            process.terminate()
    codes = {}
    for name, process in processes.items():
        try:
            codes[name] = await asyncio.wait_for(process.wait(), grace_s)
        except TimeoutError:
            process.kill()
            codes[name] = await process.wait()
    return codes


async def wait_serving(  # type: ignore[no-untyped-def]
    address: str, *, timeout_s: float, process=None, tls: ClientTls | None = None
) -> None:
    """Waits until the health service at ``address`` says SERVING, or fails with a reason."""
    async with open_channel(address, tls=tls) as channel:
        stub = health_pb2_grpc.HealthStub(channel)

        async def serving() -> bool:
            if process is not None and process.returncode is not None:
                raise AssertionError(f"process for {address} exited with {process.returncode}")
            reply = await stub.Check(health_pb2.HealthCheckRequest(), timeout=1.0)
            return reply.status == health_pb2.HealthCheckResponse.SERVING

        await wait_for(
            serving,
            f"{address} to be SERVING",
            timeout_s=timeout_s,
            interval_s=0.05,
            transient=(grpc.aio.AioRpcError,),
        )


NO_METRICS_PORTS = {f"AGENTFLEET_{name.upper()}_METRICS_PORT": "0" for name in SERVICE_NAMES}
"""Test processes serve no /metrics unless a test asks (tests/e2e/test_metrics.py does), so
they never contend for the default ports."""


async def start_process_stack(
    *,
    database_url: str,
    log_dir: Path,
    environ: Mapping[str, str] | None = None,
    names: tuple[str, ...] = CORE_SERVICES,
    timeout_s: float = 30.0,
    service_tokens: Mapping[str, str] | None = None,
    tls: ClientTls | None = None,
) -> ProcessStack:
    """Starts each named service as ``python -m services.<name>`` and waits for health.

    ``service_tokens`` (from :func:`create_service_tokens`) gives each service its own
    AGENTFLEET_SERVICE_TOKEN; ``tls``, how to reach services started with TLS ``environ``.
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    ports = {name: free_port() for name in names}
    env = {
        "DATABASE_URL": database_url,
        "AGENTFLEET_LOG_FORMAT": "json",
        "AGENTFLEET_MCP_STDIO_ALLOWLIST": TEST_STDIO_ALLOWLIST,
        **TEST_EGRESS_AND_SECRETS,
        **NO_METRICS_PORTS,
        **dict(environ or {}),
    }
    for name, port in ports.items():
        env[f"AGENTFLEET_{name.upper()}_PORT"] = str(port)
        env[f"AGENTFLEET_{name.upper()}_ADDR"] = f"127.0.0.1:{port}"
    a2a_url = ""
    if "a2a" in names:
        http_port = free_port()
        env.setdefault("AGENTFLEET_A2A_HTTP_PORT", str(http_port))
        env.setdefault("AGENTFLEET_A2A_GRPC_BINDING_PORT", str(free_port()))
        a2a_url = f"http://127.0.0.1:{env['AGENTFLEET_A2A_HTTP_PORT']}"
    processes: dict[str, asyncio.subprocess.Process] = {}
    stack = ProcessStack(
        addresses={n: f"127.0.0.1:{p}" for n, p in ports.items()},
        processes=processes,
        log_dir=log_dir,
        a2a_url=a2a_url,
    )
    try:
        for name in names:
            processes[name] = await start_service_process(
                name, _with_own_token(env, name, service_tokens), log_dir / f"{name}.log"
            )
        for name in names:
            await wait_serving(
                stack.addresses[name], timeout_s=timeout_s, process=processes[name], tls=tls
            )
    except BaseException:
        await stack.stop(grace_s=2.0)
        raise
    return stack


def _with_own_token(
    env: dict[str, str], name: str, service_tokens: Mapping[str, str] | None
) -> dict[str, str]:
    if service_tokens is None or name not in service_tokens:
        return env
    return {**env, "AGENTFLEET_SERVICE_TOKEN": service_tokens[name]}
