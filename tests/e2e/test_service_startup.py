"""A service process that cannot start says why in one line, not a traceback."""

import asyncio
import os
import socket
import sys
from pathlib import Path

import pytest

from agentfleet.postgres import embedded_pg_root
from agentfleet.postgres.embedded_pg import EmbeddedPostgres
from agentfleet.testing.services import free_port, wait_serving


async def _start(name: str, extra_env: dict[str, str]) -> asyncio.subprocess.Process:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTFLEET_")}
    env.update(extra_env)
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        f"services.{name}",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def _finish(process: asyncio.subprocess.Process) -> tuple[int, list[str]]:
    _, err = await asyncio.wait_for(process.communicate(), 60)
    lines = [line for line in err.decode().splitlines() if line.strip()]
    return process.returncode or 0, lines


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("DATABASE_URL", "mysql://root@localhost/app"),
        ("DATABASE_URL", "postgresql://localhost:notaport/app"),
        ("AGENTFLEET_EXECUTOR_PORT", "fifty"),
        ("AGENTFLEET_AUTH", "sometimes"),
    ],
)
async def test_bad_configuration_stops_with_one_line(variable: str, value: str) -> None:
    code, lines = await _finish(await _start("executor", {variable: value}))
    assert code == 2
    assert len(lines) == 1, lines
    assert lines[0].startswith("agentfleet-executor: configuration error: ")
    assert variable in lines[0]
    assert "Traceback" not in lines[0]


async def test_a_taken_port_stops_with_one_line(database_url: str) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        process = await _start(
            "history",
            {
                "DATABASE_URL": database_url,
                "AGENTFLEET_HISTORY_PORT": str(port),
                "AGENTFLEET_LOG_FORMAT": "json",
            },
        )
        code, lines = await _finish(process)
    assert code == 1
    assert lines[-1] == (
        f"agentfleet-history: cannot start: cannot listen on 127.0.0.1:{port}: address already "
        "in use (set AGENTFLEET_HISTORY_PORT to use another port)"
    )
    assert not any("Traceback" in line for line in lines)


async def test_an_unreachable_database_stops_with_one_line() -> None:
    dead = free_port()
    code, lines = await _finish(
        await _start(
            "toolpool",
            {
                "DATABASE_URL": f"postgresql://nobody@127.0.0.1:{dead}/none",
                "AGENTFLEET_TOOLPOOL_PORT": str(free_port()),
            },
        )
    )
    assert code == 1
    assert lines[-1].startswith("agentfleet-toolpool: cannot start: ")
    assert f"127.0.0.1:{dead}" in lines[-1] or "database" in lines[-1].lower()
    assert not any("Traceback" in line for line in lines)


async def test_auth_off_warns_at_start_and_sigterm_stops_cleanly(database_url: str) -> None:
    port = free_port()
    process = await _start(
        "dispatcher",
        {
            "DATABASE_URL": database_url,
            "AGENTFLEET_DISPATCHER_PORT": str(port),
            "AGENTFLEET_AUTH": "off",
            "AGENTFLEET_LOG_FORMAT": "json",
        },
    )
    await wait_serving(f"127.0.0.1:{port}", timeout_s=30, process=process)
    process.terminate()
    code, lines = await _finish(process)
    assert code == 0
    assert any("authentication is OFF" in line and '"warning"' in line for line in lines), lines


@pytest.mark.timeout(180)
async def test_a_service_stops_the_embedded_postgres_it_started(tmp_path: Path) -> None:
    """Without DATABASE_URL a service starts the embedded PostgreSQL under its data folder;
    it stops it again when it stops (the server was left running before)."""
    port = free_port()
    data = tmp_path / "data"
    process = await _start(
        "history",
        {
            "AGENTFLEET_DATA_DIR": str(data),
            "AGENTFLEET_HISTORY_PORT": str(port),
            "AGENTFLEET_HISTORY_METRICS_PORT": "0",
        },
    )
    try:
        await wait_serving(f"127.0.0.1:{port}", timeout_s=150, process=process)
        home = embedded_pg_root.home_of(data / "postgres")
        cluster = home / "data" if home else data / "postgres"
        assert (cluster / "postmaster.pid").exists()
        process.terminate()
        code, lines = await _finish(process)
        assert code == 0, lines
        assert (cluster / "PG_VERSION").exists()  # the data stays for the next start
        assert not (cluster / "postmaster.pid").exists(), "the embedded server still runs"
    finally:
        if process.returncode is None:
            process.kill()
        await asyncio.to_thread(EmbeddedPostgres(data / "postgres").remove)
