"""The README's grpcurl tour, run as written against `agentfleet up --demo` (so the README
cannot drift from the product), and its TLS tour against services with mTLS on."""

import asyncio
import os
import re
import signal
import sys
from pathlib import Path

import asyncpg
import pytest

from agentfleet.testing.certificates import mutual_tls
from agentfleet.testing.cli_process import OutputLines
from agentfleet.testing.services import create_service_tokens, free_port, start_process_stack

ROOT = Path(__file__).parents[2]
DEFAULT_PORTS = {
    "executor": 50051,
    "toolpool": 50052,
    "dispatcher": 50053,
    "history": 50054,
    "a2a": 50056,
}


def tour_script() -> str:
    readme = (ROOT / "README.md").read_text()
    block = readme.split("<!-- tour:start -->", 1)[1].split("<!-- tour:end -->", 1)[0]
    return re.sub(r"^```\w*$", "", block, flags=re.MULTILINE)


@pytest.mark.timeout(300)
async def test_the_readme_tour_works_as_written(database_url: str, tmp_path: Path) -> None:
    ports = {name: free_port() for name in DEFAULT_PORTS}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTFLEET_", "GEMINI"))}
    env.pop("GOOGLE_API_KEY", None)
    env["DATABASE_URL"] = database_url
    env["AGENTFLEET_DATA_DIR"] = str(tmp_path)
    env.update({f"AGENTFLEET_{n.upper()}_PORT": str(p) for n, p in ports.items()})
    env["AGENTFLEET_A2A_HTTP_PORT"] = str(free_port())
    env["AGENTFLEET_CONSOLE_PORT"] = str(free_port())
    stack = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agentfleet.cli.main",
        "up",
        "--demo",
        env=env,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        assert stack.stdout is not None
        await OutputLines(stack.stdout).until("stays up for you to explore", timeout_s=240)
        script = tour_script()
        for name, port in DEFAULT_PORTS.items():
            script = script.replace(f"127.0.0.1:{port}", f"127.0.0.1:{ports[name]}")
        tour = await asyncio.create_subprocess_exec(
            "bash",
            "-euo",
            "pipefail",
            "-c",
            script,
            env={**env, "PATH": f"{Path(sys.executable).parent}:{env.get('PATH', '')}"},
            cwd=ROOT,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(tour.communicate(), 180)
        output = out.decode()
        assert tour.returncode == 0, output + err.decode()
    finally:
        if stack.returncode is None:
            stack.send_signal(signal.SIGINT)
            await asyncio.wait_for(stack.wait(), 60)

    # 1. reflection and health
    assert "agentfleet.v1.ExecutorService" in output
    assert "agentfleet.v1.AgentRegistryService" in output
    assert '"status": "SERVING"' in output
    # 3. the watched run ends, completed
    assert "RUN_EVENT_TYPE_RUN_FINISHED" in output
    assert output.count("RUN_EVENT_TYPE_RUN_STARTED") >= 1
    assert "RUN_STATUS_COMPLETED" in output
    # 4. history: the run, its tree with four children, its tool calls
    assert '"agent_name": "research-assistant"' in output
    assert output.count('"agent_name": "web-browser"') >= 3
    assert '"tool_name": "spawn_agents"' in output
    # 5. the DAG was created with both tasks
    assert '"key": "a"' in output
    assert '"key": "b"' in output
    # 6. the time server was saved and answers
    assert '"created": true' in output
    assert '"ok": true' in output
    assert "time__get_current_time" in output


def tls_tour_script() -> str:
    readme = (ROOT / "README.md").read_text()
    block = readme.split("<!-- tls-tour:start -->", 1)[1].split("<!-- tls-tour:end -->", 1)[0]
    return re.sub(r"^```\w*$", "", block, flags=re.MULTILINE)


@pytest.mark.timeout(180)
async def test_the_readme_tls_tour_works_as_written(
    database_url: str, db_pool: asyncpg.Pool, tmp_path: Path, grpcurl: str
) -> None:
    """Services with mTLS on, and the README's TLS commands (grpcurl and the CLI) as written."""
    mtls = mutual_tls(tmp_path, "tour")
    tls_env = mtls.environment
    names = ("toolpool", "history", "executor")
    stack = await start_process_stack(
        database_url=database_url,
        log_dir=tmp_path / "logs",
        names=names,
        environ={
            **tls_env,
            **{f"AGENTFLEET_{n.upper()}_METRICS_PORT": "0" for n in names},
        },
        service_tokens=await create_service_tokens(db_pool, names),
        tls=mtls.client,
    )
    try:
        script = tls_tour_script()
        for name, address in stack.addresses.items():
            script = script.replace(f"127.0.0.1:{DEFAULT_PORTS[name]}", address)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTFLEET_", "GEMINI"))}
        env.update(tls_env)
        env.update({f"AGENTFLEET_{n.upper()}_ADDR": a for n, a in stack.addresses.items()})
        env["DATABASE_URL"] = database_url
        env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
        tour = await asyncio.create_subprocess_exec(
            "bash",
            "-euo",
            "pipefail",
            "-c",
            script,
            env=env,
            cwd=ROOT,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(tour.communicate(), 120)
        output = out.decode()
        assert tour.returncode == 0, output + err.decode()
        # The same server in plain text, as a client that forgot TLS would try it.
        plaintext = await asyncio.create_subprocess_exec(
            grpcurl,
            "-plaintext",
            stack.addresses["executor"],
            "list",
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        await asyncio.wait_for(plaintext.communicate(), 60)
        assert plaintext.returncode != 0
    finally:
        codes = await stack.stop(grace_s=10)
    assert "agentfleet.v1.ExecutorService" in output
    assert '"status": "SERVING"' in output
    assert codes == dict.fromkeys(names, 0), codes
