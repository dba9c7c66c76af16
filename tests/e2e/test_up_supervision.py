"""`agentfleet up` supervises its services (issue #18): one that dies is started again on its
port while the others keep running; one that keeps crashing stops everything, saying so.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from pathlib import Path

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentfleet.process.supervise import CrashLoop, RestartPolicy, supervise
from agentfleet.testing.cli_process import OutputLines, start_agentfleet, stop_up
from agentfleet.testing.services import free_port
from agentfleet.testing.waiting import wait_for

SERVICES = ("toolpool", "history", "executor", "dispatcher", "a2a")
ROW = re.compile(r"(toolpool|history|executor|dispatcher|a2a)\W+127\.0\.0\.1:(\d+)\W+(\d+)")
CONSOLE_ROW = re.compile(r"console\W+(http://127\.0\.0\.1:\d+)\W+(\d+)")


async def health(port: int) -> int:
    """The health status of the service on ``port`` (UNKNOWN when it does not answer)."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        try:
            reply = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=1.0
            )
        except grpc.aio.AioRpcError:
            return health_pb2.HealthCheckResponse.UNKNOWN
        return reply.status


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.timeout(240)
async def test_up_restarts_a_killed_service_and_leaves_the_others_alone(tmp_path: Path) -> None:
    ports = {name: free_port() for name in SERVICES}
    env = {
        k: v for k, v in os.environ.items() if k != "DATABASE_URL" and not k.startswith("GEMINI")
    }
    env.update({f"AGENTFLEET_{n.upper()}_PORT": str(p) for n, p in ports.items()})
    env["AGENTFLEET_DATA_DIR"] = str(tmp_path / "data")
    env["AGENTFLEET_A2A_HTTP_PORT"] = str(free_port())
    env["AGENTFLEET_CONSOLE_PORT"] = str(free_port())
    env.pop("GOOGLE_API_KEY", None)
    env["COLUMNS"] = "200"  # the ready table on one line per service
    process = await start_agentfleet("up", env=env, merge_stderr=True)
    assert process.stdout is not None
    output = OutputLines(process.stdout)
    console_pid = 0
    try:
        await output.until(r"^ready$", timeout_s=180)
        pids = {m.group(1): int(m.group(3)) for line in output.lines if (m := ROW.search(line))}
        assert set(pids) == set(SERVICES), output.lines

        os.kill(pids["toolpool"], signal.SIGKILL)
        said = await output.until(r"toolpool exited with code (-?\d+); restarting in", 30)
        assert said.group(1) == str(-signal.SIGKILL)
        assert "(restart 1" in said.string
        new_pid = int((await output.until(r"toolpool restarted \(pid (\d+)\)", 30)).group(1))
        assert new_pid != pids["toolpool"]

        # Back on its port...
        async def serving() -> bool:
            return await health(ports["toolpool"]) == health_pb2.HealthCheckResponse.SERVING

        await wait_for(serving, "the restarted toolpool to serve", timeout_s=60, interval_s=0.1)
        assert alive(new_pid)
        # ... while the others kept their processes, still serving, and up kept running.
        for name in ("history", "executor", "dispatcher"):
            assert alive(pids[name]), name
            assert await health(ports[name]) == health_pb2.HealthCheckResponse.SERVING, name
        assert process.returncode is None
        assert not any("stopping services" in line for line in output.lines), output.lines

        # The console is supervised too, and comes back on its port.
        console = CONSOLE_ROW.search("\n".join(output.lines))
        assert console is not None, output.lines
        os.kill(int(console.group(2)), signal.SIGKILL)
        await output.until(r"console exited with code -9; restarting in", 30)
        console_pid = int((await output.until(r"console restarted \(pid (\d+)\)", 30)).group(1))

        async def console_serving() -> bool:
            async with httpx.AsyncClient() as http:
                return (await http.get(f"{console.group(1)}/healthz")).status_code == 200

        await wait_for(
            console_serving, "the restarted console", timeout_s=60, transient=(httpx.HTTPError,)
        )
    finally:
        rest = await stop_up(process, data_dir=tmp_path / "data")
    assert process.returncode == 0, rest
    assert "stopped" in rest
    assert not alive(new_pid)
    assert console_pid
    assert not alive(console_pid)


class Child:
    """A stand-in service: a real process that exits with ``code`` at once."""

    def __init__(self, name: str, process: asyncio.subprocess.Process, log_path: Path) -> None:
        self.name = name
        self.process = process
        self.log_path = log_path

    def exit_reason(self) -> str:
        return f"{self.name} exited with code {self.process.returncode}"


async def start_exiting(code: int) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(sys.executable, "-c", f"raise SystemExit({code})")


async def start_sleeping() -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(sys.executable, "-c", "import time; time.sleep(60)")


async def test_a_service_that_keeps_crashing_stops_everything_with_one_line(
    tmp_path: Path,
) -> None:
    crashing = Child("toolpool", await start_exiting(3), tmp_path / "toolpool.log")
    steady = Child("history", await start_sleeping(), tmp_path / "history.log")
    steady_pid = steady.process.pid
    said: list[str] = []
    starts: list[str] = []

    async def respawn(name: str) -> asyncio.subprocess.Process:
        starts.append(name)
        return await start_exiting(3)

    policy = RestartPolicy(first_backoff_s=0.01, max_backoff_s=0.04, max_crashes=4, window_s=60)
    try:
        with pytest.raises(CrashLoop) as refused:
            await asyncio.wait_for(
                supervise(
                    [crashing, steady],
                    respawn=respawn,
                    stop=asyncio.Event(),
                    say=said.append,
                    policy=policy,
                ),
                30,
            )
    finally:
        steady.process.kill()
        await steady.process.wait()
    assert str(refused.value) == (
        f"toolpool exited 4 times within 60 s (last with code 3); stopping all services "
        f"(log: {tmp_path / 'toolpool.log'})"
    )
    # Three restarts, each announced with its growing backoff; the steady one untouched.
    assert starts == ["toolpool"] * 3
    exits = [line for line in said if "restarting in" in line]
    assert [line.split(";")[1].strip() for line in exits] == [
        "restarting in 0.01 s (restart 1",
        "restarting in 0.02 s (restart 2",
        "restarting in 0.04 s (restart 3",
    ], said
    assert all(line.startswith("toolpool exited with code 3;") for line in exits)
    assert steady.process.pid == steady_pid


async def test_supervision_returns_on_stop_without_restarting(tmp_path: Path) -> None:
    child = Child("executor", await start_exiting(1), tmp_path / "executor.log")
    stop = asyncio.Event()
    said: list[str] = []

    async def respawn(name: str) -> asyncio.subprocess.Process:
        raise AssertionError("nothing restarts after Ctrl-C")

    task = asyncio.ensure_future(
        supervise(
            [child],
            respawn=respawn,
            stop=stop,
            say=said.append,
            policy=RestartPolicy(first_backoff_s=30),
        )
    )
    # The exit was seen; the restart waits out its backoff.
    await wait_for(lambda: said, "the exit to be reported", timeout_s=10, interval_s=0.01)
    stop.set()
    await asyncio.wait_for(task, 5)
    assert said == [
        f"executor exited with code 1; restarting in 30 s (restart 1; log: "
        f"{tmp_path / 'executor.log'})"
    ]
