"""How ``agentfleet up`` starts the console (services/console): after the four services,
with their addresses and nothing else of the platform's (no database URL, no service
token, no secrets key: it acts only as whoever signs in), health-checked over HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from pathlib import Path
from typing import Protocol
from urllib.parse import quote

import aiohttp
from rich.text import Text

from agentfleet.cli.render import console
from agentfleet.config import Settings
from agentfleet.errors import Unavailable

PLATFORM_SECRETS = (
    "DATABASE_URL",
    "AGENTFLEET_SERVICE_TOKEN",
    "AGENTFLEET_SERVICE_TOKEN_FILE",
    "AGENTFLEET_SECRETS_KEYS",
    "AGENTFLEET_TOKEN",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "GOOGLE_APPLICATION_CREDENTIALS",
)
"""Variables of ``up``'s own environment the console is not given."""


class Started(Protocol):
    name: str
    address: str
    process: asyncio.subprocess.Process
    log_path: Path


def console_url(settings: Settings, port: int) -> str:
    host = settings.listen_host
    host = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    return f"http://{host}:{port}"


async def spawn_console(
    settings: Settings, log_dir: Path
) -> tuple[asyncio.subprocess.Process, str, Path]:
    from agentfleet.console_settings import LOOPBACK_HOSTS, load_console_settings

    port = load_console_settings().port
    environment = {k: v for k, v in os.environ.items() if k not in PLATFORM_SECRETS}
    environment.update(
        {f"AGENTFLEET_{name.upper()}_ADDR": address for name, address in settings.addresses.items()}
    )
    host = settings.listen_host
    if "AGENTFLEET_CONSOLE_ALLOWED_HOSTS" not in environment and host not in (
        "0.0.0.0",
        "::",
        *LOOPBACK_HOSTS,
    ):
        # Served on a named address: browsers use that name too.
        named = f"[{host}]" if ":" in host else host
        environment["AGENTFLEET_CONSOLE_ALLOWED_HOSTS"] = ",".join((*LOOPBACK_HOSTS, named))
    log_path = log_dir / "console.log"
    with log_path.open("ab") as log_file:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "services.console",
            env=environment,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log_file,
            stderr=log_file,
        )
    return process, console_url(settings, port), log_path


async def wait_console(child: Started, *, timeout_s: float, stop: asyncio.Event) -> None:
    """Until the console answers /healthz, or it exits, or ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1.0)) as http:
        while True:
            if child.process.returncode is not None:
                lines = child.log_path.read_text(errors="replace").strip().splitlines()
                last = lines[-1] if lines else "no output"
                raise Unavailable(
                    f"console exited with code {child.process.returncode}: {last} "
                    f"(log: {child.log_path})"
                )
            if stop.is_set():
                raise KeyboardInterrupt
            if time.monotonic() > deadline:
                raise Unavailable(
                    f"console did not answer within {timeout_s:.0f}s; see {child.log_path}"
                )
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with http.get(f"{child.address}/healthz") as reply:
                    if reply.status == 200:
                        return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.1)


def print_console(child: Started, *, demo: bool, token: str | None) -> None:
    """The console's address; for the demo, with the demo project's token in the fragment
    (which the browser never sends to a server; the page takes it out of the address bar at
    once). With AGENTFLEET_AUTH=off the services take any token."""
    if not demo:
        console.print(
            Text.assemble(
                ("console", "bold"),
                f"   {child.address}/ (sign in with a project token from agentfleet token create)",
            ),
            soft_wrap=True,
        )
        return
    from agentfleet.cli.stack.demo import DEMO_PROJECT

    link = (
        f"{child.address}/#/signin?project={quote(DEMO_PROJECT)}"
        f"&token={quote(token or 'auth-off', safe='')}"
    )
    console.print(
        Text.assemble(("console", "bold"), "   sign in to the demo project: ", link),
        soft_wrap=True,
    )
