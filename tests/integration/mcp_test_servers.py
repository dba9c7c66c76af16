"""Helpers for tests against real MCP servers: HTTP server processes and child processes."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx2

from agentfleet.mcp.servers import McpServerConfig

ROOT = Path(__file__).resolve().parents[2]
TEST_SERVER = str(ROOT / "examples" / "mcp" / "test_server" / "server.py")
PATHS = {"sse": "/sse", "streamable_http": "/mcp"}
CLI_TRANSPORT = {"sse": "sse", "streamable_http": "streamable-http"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class HttpServer:
    """The test server over SSE or streamable HTTP in its own process, on a fixed port."""

    def __init__(
        self, transport: str, port: int | None = None, *, unknown_session: str = "404"
    ) -> None:
        self.transport = transport
        self.unknown_session = unknown_session
        """How the server answers an unknown session id: ``404`` (the SDK), ``400`` or
        ``400-text`` (the reference server's answer, as JSON-RPC or as text)."""
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}{PATHS[transport]}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> HttpServer:
        self.process = subprocess.Popen(
            [
                sys.executable,
                TEST_SERVER,
                *("--transport", CLI_TRANSPORT[self.transport]),
                *("--port", str(self.port)),
                *("--unknown-session", self.unknown_session),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        return self

    def wait_accepting(self, timeout_s: float = 20.0) -> None:
        """Blocks until the port accepts connections (the server is up)."""
        deadline = time.monotonic() + timeout_s
        while True:
            assert self.process is not None
            assert self.process.poll() is None, f"{self.transport} server exited"
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise AssertionError(f"{self.transport} server not up on {self.port}") from None
                time.sleep(0.02)

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    async def stats(self) -> dict[str, int]:
        async with httpx2.AsyncClient() as client:
            response = await client.get(f"http://127.0.0.1:{self.port}/stats")
            return response.json()

    def config(self, name: str, **changes: Any) -> McpServerConfig:
        return McpServerConfig(
            project_id=changes.pop("project_id", "proj-mcp"),
            name=name,
            transport=self.transport,  # type: ignore[arg-type]
            url=self.url,
            **changes,
        )


def stdio_config(name: str, **changes: Any) -> McpServerConfig:
    fields: dict[str, Any] = {
        "project_id": "proj-mcp",
        "command": sys.executable,
        "args": (TEST_SERVER, "--transport", "stdio"),
    }
    return McpServerConfig(name=name, transport="stdio", **(fields | changes))


def children(marker: str) -> list[int]:
    """Live (not zombie) child processes of this process whose command line has ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        state, ppid = fields[0], int(fields[1])
        if ppid == os.getpid() and state != "Z" and marker in cmdline:
            found.append(int(entry))
    return found
