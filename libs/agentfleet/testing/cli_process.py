"""The ``agentfleet`` command as a child process, as a user runs it (``python -m
agentfleet.cli.main``, so it runs this checkout's code whatever is on PATH)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping


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
