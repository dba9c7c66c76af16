"""The ``agentfleet`` remote commands as the CLI tests call them: :func:`run_remote` in this
process against the four services in-process (auth on), with a project and admin token of
the test's own."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from agentfleet.cli.main import run_remote
from agentfleet.testing.services import Stack

MARKER = "cli-e2e-helper"
MANIFEST = f"""
name: cli-test
version: "1.0.0"
description: one agent for the CLI tests
agents:
  - name: helper
    description: answers in one line
    system_prompt: "You answer briefly. {MARKER}"
    model: {{provider: google, name: gemini-2.5-flash}}
    tools: []
    visibility: external
"""


@dataclass(kw_only=True, slots=True)
class Cli:
    stack: Stack
    environ: dict[str, str]
    capfd: pytest.CaptureFixture[str]

    async def __call__(self, *argv: str, **extra: str) -> tuple[int, str, str]:
        self.capfd.readouterr()
        code = await run_remote(list(argv), {**self.environ, **extra})
        out, err = self.capfd.readouterr()
        # The services run in this process and log to the same streams; keep the CLI's
        # lines (the subprocess test below checks the real command's streams whole).
        err = "".join(line for line in err.splitlines(True) if line.startswith("agentfleet:"))
        return code, out, err

    async def json_lines(self, *argv: str) -> list[dict]:  # type: ignore[type-arg]
        code, out, err = await self(*argv, "--json")
        assert code == 0, (err, out[-2000:])
        return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


@pytest.fixture
async def cli(stub_stack: Stack, capfd: pytest.CaptureFixture[str], tmp_path: Path) -> Cli:
    project = f"cli-{uuid.uuid4().hex[:8]}"
    environ = {
        "AGENTFLEET_TOKEN": await stub_stack.create_token(project, role="admin"),
        "AGENTFLEET_PROJECT": project,
        **{f"AGENTFLEET_{n.upper()}_ADDR": stub_stack.address(n) for n in stub_stack.services},
    }
    return Cli(stack=stub_stack, environ=environ, capfd=capfd)


async def install(cli: Cli, tmp_path: Path) -> None:
    manifest = tmp_path / "manifest.yaml"
    manifest.write_text(MANIFEST)
    code, out, err = await cli("install", str(manifest))
    assert (code, err) == (0, "")
    assert "installed cli-test 1.0.0" in out
    assert "created agents: helper" in out
