"""The servers every system shares in one bench run: the stub Gemini model in its own
process, and a PostgreSQL server whose durability settings are read back and stated."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from agentfleet.postgres import db

STUB_START_TIMEOUT_S = 30.0
DURABILITY_SETTINGS = ("fsync", "synchronous_commit", "full_page_writes")


@dataclass(frozen=True, slots=True)
class StubProcess:
    base_url: str
    pid: int


@contextmanager
def stub_process() -> Iterator[StubProcess]:
    """``python -m agentfleet.gemini_stub`` on a free loopback port, stopped (SIGINT, then
    kill) when the block ends."""
    process = subprocess.Popen(
        # Recording every request would keep each conversation alive in the stub: its
        # garbage collections then pause its replies, read here as slow model calls.
        [sys.executable, "-m", "agentfleet.gemini_stub", "--port", "0", "--no-record-requests"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=Path(__file__).parents[1],
    )
    try:
        assert process.stdout is not None
        # The stub prints one line once it listens: "... at http://127.0.0.1:PORT with ...".
        line = process.stdout.readline()
        found = re.search(r"at (http://\S+) with", line)
        if not found:
            raise RuntimeError(f"the stub model did not start: {line!r}")
        yield StubProcess(base_url=found.group(1), pid=process.pid)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def postgres_facts(url: str) -> tuple[int, dict[str, str]]:
    """The postmaster's pid (the parent of our backend) and the durability settings as the
    server reports them."""
    conn = await db.connect(url)
    try:
        backend = int(await conn.fetchval("SELECT pg_backend_pid()"))
        settings = {name: str(await conn.fetchval(f"SHOW {name}")) for name in DURABILITY_SETTINGS}
        # Read while the backend lives: it exits when the connection closes.
        stat = Path(f"/proc/{backend}/stat").read_text()
    finally:
        await conn.close()
    postmaster = int(stat[stat.rindex(")") + 2 :].split()[1])
    return postmaster, settings


def describe(settings: dict[str, str]) -> str:
    return ", ".join(f"{name}={value}" for name, value in settings.items())
