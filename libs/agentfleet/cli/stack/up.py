"""``agentfleet up``: PostgreSQL, migrations, and the four services as separate processes.

The services run as children of this command, each logging to ``<data dir>/logs``. One
that exits is started again with a backoff (:mod:`agentfleet.process.supervise`); one that
keeps crashing stops everything. Ctrl-C (or SIGTERM) stops them in reverse order with
SIGTERM, so each one drains, then stops the embedded PostgreSQL if this command started it.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from rich.table import Table
from rich.text import Text

from agentfleet.auth import CreatedToken, Role, TokenStore
from agentfleet.cli.render import console
from agentfleet.cli.stack.console import print_console, spawn_console, wait_console
from agentfleet.config import SERVICE_NAMES, ConfigError, Settings, child_environment
from agentfleet.errors import Unavailable
from agentfleet.mcp.stdio import STDIO_ALLOWLIST_SETTING, format_allowlist
from agentfleet.postgres import migrate
from agentfleet.postgres.db import create_pool
from agentfleet.postgres.embedded_pg import resolve_database_url
from agentfleet.process.hardening import make_non_dumpable
from agentfleet.process.stop_signals import stop_event
from agentfleet.process.supervise import supervise
from agentfleet.rpc.clients import open_channel
from agentfleet.rpc.tls import ClientTls, client_tls
from agentfleet.secrets.secrets_crypto import KEY_FILE_NAME, KEYS_SETTING, local_key_file

LOCAL_STDIO_COMMANDS = (
    ("python", "examples/mcp/offline_web/server.py"),  # the research product's web server
    ("python", "-m", "mcp_server_time"),  # the README tour's published time server
)
"""Stdio MCP command lines ``up`` allows when AGENTFLEET_MCP_STDIO_ALLOWLIST is unset."""

# Dependencies first: the executor calls toolpool; the dispatcher calls the executor.
START_ORDER = ("toolpool", "history", "executor", "dispatcher", "a2a")
assert sorted(START_ORDER) == sorted(SERVICE_NAMES)


@dataclass(kw_only=True, slots=True)
class ServiceProcess:
    name: str
    address: str
    process: asyncio.subprocess.Process
    log_path: Path

    def exit_reason(self) -> str:
        """One line: the exit code and the log's last line (where a traceback names its
        error), and where the whole log is."""
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            lines = []
        last = next((line.strip() for line in reversed(lines) if line.strip()), "no output")
        code = self.process.returncode
        return f"{self.name} exited with code {code}: {last} (log: {self.log_path})"


async def run_up(
    settings: Settings, *, exit_when_ready: bool, startup_timeout_s: float, demo: bool = False
) -> int:
    make_non_dumpable()  # holds the database URL and tokens: hide them from same-user processes
    database_url, embedded = await resolve_database_url(settings)
    where = "embedded PostgreSQL" if embedded is not None else "DATABASE_URL"
    console.print(Text.assemble(("database", "bold"), f"  {where}"))
    await migrate.migrate_up(database_url, directory=settings.migrations_dir)

    overrides = {"DATABASE_URL": database_url}
    if not settings.mcp_stdio_allowlist:
        # The operator allowed nothing: the local stack allows what the demo and the
        # README tour run, and nothing else.
        overrides[STDIO_ALLOWLIST_SETTING] = format_allowlist(LOCAL_STDIO_COMMANDS)
    if not settings.secrets_keys:
        # Secrets are only ever stored encrypted: the local stack keeps its own key.
        overrides[KEYS_SETTING] = local_key_file(settings.data_dir)
        console.print(
            Text.assemble(
                ("secrets", "bold"), f"   key kept in {settings.data_dir / KEY_FILE_NAME}"
            )
        )
    stub = None
    if not settings.uses_real_gemini and settings.gemini_base_url is None:
        from agentfleet.gemini_stub import GeminiStub, offline_script
        from agentfleet.gemini_stub.quota import parse_quota

        try:
            quota = parse_quota(settings.stub_quota) if settings.stub_quota else None
        except ValueError as exc:
            raise ConfigError("AGENTFLEET_STUB_QUOTA", str(exc)) from exc
        # Agents without a script get the offline model's placeholder answers, not errors.
        stub = GeminiStub(fallback=offline_script(), quota=quota)
        overrides["AGENTFLEET_GEMINI_BASE_URL"] = await stub.start(host="127.0.0.1", port=0)
        console.print(
            Text.assemble(
                ("model", "bold"),
                "     ",
                (
                    f"offline stub Gemini server at {stub.base_url} "
                    "(scripted replies, not a real model)",
                    "yellow",
                ),
                ": an agent without a script gets a placeholder answer; script one with POST "
                f'{stub.base_url}/_stub/scripts (README: "The offline model"); set '
                "GEMINI_API_KEY or GOOGLE_GENAI_USE_VERTEXAI to use Gemini",
            )
        )
        if quota is not None:
            console.print(
                f"[bold]quota[/bold]     the stub enforces {quota.to_text()} per model "
                f"(AGENTFLEET_STUB_QUOTA; counts at {stub.base_url}/_stub/quota)"
            )
    # Each service presents its own token, good only for the methods it calls (one
    # AGENTFLEET_SERVICE_TOKEN from the shell could fit one service only: it is replaced).
    service_tokens: dict[str, CreatedToken] = {}
    if settings.auth_enabled:
        service_tokens = await _create_service_tokens(database_url)
    elif not settings.auth_enabled:
        console.print(
            Text.assemble(
                ("auth", "bold"), "      ", ("OFF", "red"), " (AGENTFLEET_AUTH=off): local use only"
            )
        )

    log_dir = settings.data_dir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    children: list[ServiceProcess] = []
    demo_token: CreatedToken | None = None
    stop = stop_event()
    try:
        for name in START_ORDER:
            children.append(
                await _spawn(name, settings, _with_token(overrides, service_tokens, name), log_dir)
            )
        await _wait_healthy(
            children, tls=client_tls(settings), timeout_s=startup_timeout_s, stop=stop
        )
        # The console last: it only calls the others (over gRPC, as whoever signs in).
        children.append(await _spawn_console(settings, log_dir))
        await wait_console(children[-1], timeout_s=startup_timeout_s, stop=stop)
        if demo and settings.auth_enabled:
            demo_token = await _create_token(database_url, project_id="demo", role="admin")
        print_console(children[-1], demo=demo, token=demo_token.token if demo_token else None)
        _print_ready(children, log_dir)
        if demo:
            code = await _until_stopped(
                _demo(children, database_url, demo_token.token if demo_token else None, stub),
                stop,
                default=130,
            )
            if exit_when_ready or code != 0:
                return code
            console.print("the stack stays up for you to explore; press Ctrl-C to stop")
        if not exit_when_ready:

            async def respawn(name: str) -> asyncio.subprocess.Process:
                if name == "console":
                    return (await _spawn_console(settings, log_dir)).process
                environment = _with_token(overrides, service_tokens, name)
                return (await _spawn(name, settings, environment, log_dir)).process

            # Until Ctrl-C: a service that exits is started again; one that keeps crashing
            # raises CrashLoop (Unavailable), and everything stops below.
            await supervise(children, respawn=respawn, stop=stop, say=console.print)
        return 0
    finally:
        console.print("stopping services…")
        await _stop_all(children, grace_s=settings.shutdown_grace_s + 5)
        if stub is not None:
            await stub.stop()
        for token in (*service_tokens.values(), demo_token):
            if token is not None:
                await _revoke_token(database_url, token.token_id)
        if embedded is not None:
            embedded.stop()
        console.print("stopped")


async def _demo(
    children: list[ServiceProcess], database_url: str, token: str | None, stub: object
) -> int:
    from agentfleet.cli.stack.demo import run_demo

    return await run_demo(
        addresses={child.name: child.address for child in children},
        database_url=database_url,
        token=token,
        stub=stub,  # type: ignore[arg-type]
    )


async def _until_stopped(work: Awaitable[int], stop: asyncio.Event, *, default: int) -> int:
    """The result of ``work``, or ``default`` if Ctrl-C comes first (``work`` is cancelled)."""
    task = asyncio.ensure_future(work)
    stopped = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
    if not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return default
    return task.result()


async def _spawn(
    name: str, settings: Settings, overrides: dict[str, str], log_dir: Path
) -> ServiceProcess:
    log_path = log_dir / f"{name}.log"
    log_file = log_path.open("ab")
    try:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            f"services.{name}",
            env=child_environment(overrides),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log_file,
            stderr=log_file,
        )
    finally:
        log_file.close()
    return ServiceProcess(
        name=name,
        address=f"127.0.0.1:{settings.ports[name]}",
        process=process,
        log_path=log_path,
    )


async def _spawn_console(settings: Settings, log_dir: Path) -> ServiceProcess:
    process, url, log_path = await spawn_console(settings, log_dir)
    return ServiceProcess(name="console", address=url, process=process, log_path=log_path)


async def _wait_healthy(
    children: list[ServiceProcess],
    *,
    tls: ClientTls | None,
    timeout_s: float,
    stop: asyncio.Event,
) -> None:
    """Until every child answers SERVING, over TLS when the services serve it (the same
    AGENTFLEET_TLS_* files every client of theirs uses)."""
    deadline = time.monotonic() + timeout_s
    for child in children:
        async with open_channel(child.address, tls=tls) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            while True:
                if child.process.returncode is not None:
                    raise Unavailable(child.exit_reason())
                if stop.is_set():
                    raise KeyboardInterrupt
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise Unavailable(
                        f"{child.name} did not become healthy within {timeout_s:.0f}s; "
                        f"see {child.log_path}"
                    )
                with contextlib.suppress(grpc.aio.AioRpcError):
                    reply = await stub.Check(
                        health_pb2.HealthCheckRequest(service=""), timeout=min(1.0, remaining)
                    )
                    if reply.status == health_pb2.HealthCheckResponse.SERVING:
                        break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 0.1)


async def _stop_all(children: list[ServiceProcess], *, grace_s: float) -> None:
    for child in reversed(children):
        if child.process.returncode is None:
            child.process.terminate()
    for child in reversed(children):
        try:
            await asyncio.wait_for(child.process.wait(), grace_s)
        except TimeoutError:
            child.process.kill()
            await child.process.wait()


def _print_ready(children: list[ServiceProcess], log_dir: Path) -> None:
    table = Table("service", "address", "pid", title="agentfleet is up", title_justify="left")
    for child in children:
        table.add_row(child.name, child.address, str(child.process.pid))
    console.print(table)
    console.print(f"logs in {log_dir}; press Ctrl-C to stop")
    console.print("ready")


async def _create_service_tokens(database_url: str) -> dict[str, CreatedToken]:
    pool = await create_pool(database_url, min_size=1, max_size=1)
    try:
        store = TokenStore(pool)
        return {
            name: await store.create(
                project_id=None, role="service", service=name, name="agentfleet up"
            )
            for name in SERVICE_NAMES
        }
    finally:
        await pool.close()


def _with_token(
    overrides: dict[str, str], service_tokens: dict[str, CreatedToken], name: str
) -> dict[str, str]:
    """The child environment of service ``name``: its own token, if ``up`` made them."""
    if name not in service_tokens:
        return overrides
    token = service_tokens[name].token
    return {**overrides, "AGENTFLEET_SERVICE_TOKEN": token, "AGENTFLEET_SERVICE_TOKEN_FILE": ""}


async def _create_token(database_url: str, *, project_id: str | None, role: Role) -> CreatedToken:
    pool = await create_pool(database_url, min_size=1, max_size=1)
    try:
        return await TokenStore(pool).create(project_id=project_id, role=role, name="agentfleet up")
    finally:
        await pool.close()


async def _revoke_token(database_url: str, token_id: str) -> None:
    pool = await create_pool(database_url, min_size=1, max_size=1)
    try:
        await TokenStore(pool).revoke(token_id)
    finally:
        await pool.close()
