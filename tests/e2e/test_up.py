"""`agentfleet up` on the embedded default: four processes, health, reflection, clean stop."""

import asyncio
import json
import os
from pathlib import Path

import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentfleet.postgres import embedded_pg_root
from agentfleet.rpc.clients import open_channel
from agentfleet.testing.certificates import mutual_tls
from agentfleet.testing.cli_process import OutputLines, start_agentfleet, stop_up
from agentfleet.testing.services import free_port

SERVICES = {
    "executor": ["agentfleet.v1.ExecutorService", "agentfleet.v1.AgentRegistryService"],
    "toolpool": ["agentfleet.v1.ToolPoolService"],
    "dispatcher": ["agentfleet.v1.DispatcherService"],
    "history": ["agentfleet.v1.HistoryService"],
    "a2a": [],  # its gRPC port serves health only; A2A itself is HTTP
}


def _up_environment(tmp_path: Path, ports: dict[str, int], **extra: str) -> dict[str, str]:
    """This process's environment without agentfleet's, Gemini's or a database's settings,
    with the services' ports and a data folder under ``tmp_path``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AGENTFLEET_", "GEMINI"))
        and k not in ("DATABASE_URL", "GOOGLE_API_KEY")
    }
    env.update({f"AGENTFLEET_{n.upper()}_PORT": str(p) for n, p in ports.items()})
    env["AGENTFLEET_DATA_DIR"] = str(tmp_path / "data")
    env["AGENTFLEET_A2A_HTTP_PORT"] = str(free_port())
    env["AGENTFLEET_CONSOLE_PORT"] = str(free_port())
    return {**env, **extra}


async def _run(*argv: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), 30)
    return process.returncode or 0, out.decode(), err.decode()


@pytest.mark.timeout(240)
async def test_up_serves_all_four_services_on_embedded_postgres(
    tmp_path: Path, grpcurl: str
) -> None:
    ports = {name: free_port() for name in SERVICES}
    # tmp_path's folders are private (0700): up must not open them, even as root.
    modes_before = {folder: folder.stat().st_mode for folder in [tmp_path, *tmp_path.parents]}
    console_port = free_port()
    env = _up_environment(tmp_path, ports, AGENTFLEET_CONSOLE_PORT=str(console_port))
    process = await start_agentfleet("up", env=env)
    try:
        output = OutputLines(process.stdout)  # type: ignore[arg-type]
        await output.until(r"^\s*ready\s*$", timeout_s=180)
        banner = output.text
        assert "embedded PostgreSQL" in banner
        assert "offline stub Gemini server" in banner
        for port in ports.values():
            assert f"127.0.0.1:{port}" in banner
        # The console too (issue 34), on its HTTP port, with its CSP.
        assert f"http://127.0.0.1:{console_port}/" in banner
        async with httpx.AsyncClient() as http:
            page = await http.get(f"http://127.0.0.1:{console_port}/")
        assert page.status_code == 200
        assert "frame-ancestors 'none'" in page.headers["content-security-policy"]

        for name, port in ports.items():
            code, out, err = await _run(grpcurl, "-plaintext", f"127.0.0.1:{port}", "list")
            assert code == 0, err
            listed = set(out.split())
            assert set(SERVICES[name]) <= listed, (name, listed)
            assert "grpc.health.v1.Health" in listed

            code, out, err = await _run(
                grpcurl, "-plaintext", f"127.0.0.1:{port}", "grpc.health.v1.Health/Check"
            )
            assert code == 0, err
            assert json.loads(out) == {"status": "SERVING"}

        # The embedded database keeps its data for the next start: under the data folder,
        # or (as root, out of its server user's reach) in the home recorded there.
        home = embedded_pg_root.home_of(tmp_path / "data" / "postgres")
        cluster = home / "data" if home else tmp_path / "data" / "postgres"
        assert (cluster / "PG_VERSION").exists()
    finally:
        rest = await stop_up(process, data_dir=tmp_path / "data")
    assert process.returncode == 0, rest
    assert "stopped" in rest
    assert {folder: folder.stat().st_mode for folder in modes_before} == modes_before


@pytest.mark.timeout(180)
async def test_up_with_tls_checks_the_services_over_tls(tmp_path: Path, database_url: str) -> None:
    """With the AGENTFLEET_TLS_* files set the services serve only TLS, so up must check
    their health over TLS too (it used plain text and gave up after its startup timeout)."""
    mtls = mutual_tls(tmp_path, "up")
    ports = {name: free_port() for name in SERVICES}
    metrics = {f"AGENTFLEET_{n.upper()}_METRICS_PORT": "0" for n in ports}
    env = _up_environment(tmp_path, ports, DATABASE_URL=database_url, **metrics, **mtls.environment)
    process = await start_agentfleet("up", env=env)
    try:
        output = OutputLines(process.stdout)  # type: ignore[arg-type]
        await output.until(r"^\s*ready\s*$", timeout_s=120)
        for port in ports.values():
            async with open_channel(f"127.0.0.1:{port}", tls=mtls.client) as channel:
                reply = await health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(service=""), timeout=10
                )
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        rest = await stop_up(process, data_dir=None)  # its database is the test's
    assert process.returncode == 0, rest
