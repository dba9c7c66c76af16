"""The ``agentfleet`` command as a child process, as a user runs it (``python -m
agentfleet.cli.main``, so it runs this checkout's code whatever is on PATH)."""

from __future__ import annotations

import asyncio
import re
import signal
import sys
from collections.abc import Mapping
from pathlib import Path

from agentfleet.postgres.embedded_pg import EmbeddedPostgres


async def start_agentfleet(
    *argv: str, env: Mapping[str, str], merge_stderr: bool = False
) -> asyncio.subprocess.Process:
    """``agentfleet ARGV`` with ``env``; stdout piped, stderr piped or (``merge_stderr``)
    into stdout."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agentfleet.cli.main",
        *argv,
        env=dict(env),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT if merge_stderr else asyncio.subprocess.PIPE,
    )


async def stop_up(process: asyncio.subprocess.Process, *, data_dir: Path | None) -> str:
    """Ctrl-C to ``agentfleet up`` if it still runs; its remaining output (stdout, then
    stderr) once it has exited. The embedded PostgreSQL it made under ``data_dir`` is removed
    (as root the cluster may live in a folder made for it, outside ``data_dir``)."""
    if process.returncode is None:
        process.send_signal(signal.SIGINT)
    out, err = await asyncio.wait_for(process.communicate(), 60)
    if data_dir is not None:
        await asyncio.to_thread(EmbeddedPostgres(data_dir / "postgres").remove)
    return out.decode() + (err or b"").decode()


class OutputLines:
    """The lines a child process (``agentfleet up``) prints on ``stream``, read as they come."""

    def __init__(self, stream: asyncio.StreamReader) -> None:
        self._stream = stream
        self.lines: list[str] = []

    @property
    def text(self) -> str:
        """Everything read so far."""
        return "".join(self.lines)

    async def until(self, pattern: str, timeout_s: float) -> re.Match[str]:
        """The first line, read so far or next, that ``pattern`` is found in; fails if the
        process closes its output first, showing what it printed."""
        compiled = re.compile(pattern)
        for line in self.lines:
            if found := compiled.search(line):
                return found

        async def read() -> re.Match[str]:
            while True:
                raw = await self._stream.readline()
                if not raw:
                    raise AssertionError("agentfleet up exited early:\n" + self.text)
                line = raw.decode()
                self.lines.append(line)
                if found := compiled.search(line):
                    return found

        return await asyncio.wait_for(read(), timeout_s)
