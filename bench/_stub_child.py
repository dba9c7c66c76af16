"""A bench's own stub model in a child process: the script runs itself with ``--serve-stub``
(:func:`serve`), so the stub's HTTP server does not share the measured process's event loop
or CPU, and the parent reads the base URL the child prints (:func:`stub_child`)."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator

from agentfleet.gemini_stub import GeminiStub
from agentfleet.process.stop_signals import stop_event

READY = "bench stub at "
"""What the stub process prints, followed by its base URL, once it serves."""


async def serve(stub: GeminiStub) -> None:
    """The stub's own process: serves ``stub`` until SIGTERM or SIGINT."""
    print(f"{READY}{await stub.start()}", flush=True)
    stopping = stop_event()
    try:
        await stopping.wait()
    finally:
        await stub.stop()


@contextlib.asynccontextmanager
async def stub_child(script: str) -> AsyncIterator[str]:
    """The base URL of ``python script --serve-stub`` once it serves; stopped at the end."""
    child = await asyncio.create_subprocess_exec(
        sys.executable, script, "--serve-stub", stdout=asyncio.subprocess.PIPE
    )
    try:
        assert child.stdout is not None
        # readline returns once the stub printed its URL, or b"" if it died first.
        line = (await asyncio.wait_for(child.stdout.readline(), timeout=60)).decode()
        if not line.startswith(READY):
            raise RuntimeError(f"the stub process did not start: {line!r}")
        yield line.removeprefix(READY).strip()
    finally:
        if child.returncode is None:
            child.terminate()
        await asyncio.wait_for(child.wait(), timeout=30)
