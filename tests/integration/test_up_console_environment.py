"""``agentfleet up`` gives the console no platform credential (issue 34): the console
process it starts has the services' addresses but no DATABASE_URL, service token, secrets
key or model key, even when up's own environment holds them."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agentfleet.cli.stack.console import spawn_console, wait_console
from agentfleet.cli.stack.up import ServiceProcess
from agentfleet.testing.services import free_port
from agentfleet.testing.services import test_settings as settings_from


async def test_the_console_process_gets_addresses_and_no_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secrets = {
        "DATABASE_URL": "postgresql://u:pw@db/x",
        "AGENTFLEET_SERVICE_TOKEN": "service-secret",
        "AGENTFLEET_SECRETS_KEYS": "k1:secret-key",
        "GEMINI_API_KEY": "model-secret",
    }
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    port = free_port()
    monkeypatch.setenv("AGENTFLEET_CONSOLE_PORT", str(port))
    settings = settings_from(AGENTFLEET_HISTORY_ADDR="127.0.0.1:1")
    process, url, log_path = await spawn_console(settings, tmp_path)

    child = ServiceProcess(name="console", address=url, process=process, log_path=log_path)
    try:
        assert url == f"http://127.0.0.1:{port}"
        await wait_console(child, timeout_s=30, stop=asyncio.Event())
        try:
            raw = Path(f"/proc/{process.pid}/environ").read_bytes()
        except PermissionError:
            pytest.skip("cannot read another process's environment here")
        environment = dict(
            entry.split("=", 1) for entry in raw.decode().split("\0") if "=" in entry
        )
        for name in secrets:
            assert name not in environment, name
        assert environment["AGENTFLEET_HISTORY_ADDR"] == "127.0.0.1:1"
    finally:
        process.terminate()
        assert await asyncio.wait_for(process.wait(), 15) == 0
