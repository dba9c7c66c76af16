"""A newcomer's first agent on `agentfleet up` (no demo): with no stub script it completes.

`agentfleet up` runs as a real process; the agent is installed and run with the real
`agentfleet` command, as a newcomer would, and the database says how the runs ended.
"""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path

import aiohttp
import asyncpg
import pytest

from agentfleet.auth import TokenStore
from agentfleet.gemini_stub.offline_model import NOTICE
from agentfleet.testing.cli_process import OutputLines, start_agentfleet, stop_up
from agentfleet.testing.services import free_port

SERVICES = ("executor", "toolpool", "dispatcher", "history", "a2a")
MANIFEST = """
name: my-first-product
version: "0.1.0"
description: what a newcomer writes first
agents:
  - name: greeter
    description: says hello
    system_prompt: "You greet people warmly."
    model: {provider: google, name: gemini-2.5-flash}
    tools: []
    visibility: external
  - name: librarian
    description: looks at the knowledge graph
    system_prompt: "You answer from the knowledge graph."
    model: {provider: google, name: gemini-2.5-flash}
    tools: [list_entities]
    visibility: external
"""


async def _agentfleet(env: dict[str, str], *argv: str) -> tuple[int, str, str]:
    process = await start_agentfleet(*argv, env=env)
    out, err = await asyncio.wait_for(process.communicate(), 120)
    return process.returncode or 0, out.decode(), err.decode()


@pytest.mark.timeout(300)
async def test_an_agent_without_a_stub_script_completes_on_up(
    database_url: str, db_pool: asyncpg.Pool, tmp_path: Path
) -> None:
    ports = {name: free_port() for name in SERVICES}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTFLEET_", "GEMINI"))}
    env.pop("GOOGLE_API_KEY", None)
    env.pop("GOOGLE_GENAI_USE_VERTEXAI", None)
    env.update({f"AGENTFLEET_{n.upper()}_PORT": str(p) for n, p in ports.items()})
    env.update({"DATABASE_URL": database_url, "AGENTFLEET_DATA_DIR": str(tmp_path)})
    env["AGENTFLEET_A2A_HTTP_PORT"] = str(free_port())
    env["AGENTFLEET_CONSOLE_PORT"] = str(free_port())
    up = await start_agentfleet("up", env=env)
    try:
        output = OutputLines(up.stdout)  # type: ignore[arg-type]
        await output.until(r"^\s*ready\s*$", timeout_s=180)
        banner = output.text
        # The stub's address and how to script it are printed.
        found = re.search(r"offline stub Gemini server at (http://127\.0\.0\.1:\d+)", banner)
        assert found is not None, banner
        stub_url = found.group(1)
        assert f"{stub_url}/_stub/scripts" in " ".join(banner.split())
        async with aiohttp.ClientSession() as http, http.get(f"{stub_url}/_stub/scripts") as got:
            # No script of any product: only the fallback answers.
            assert [s["name"] for s in (await got.json())["scripts"]] == ["offline-default"]

        project = "newcomer"
        token = await TokenStore(db_pool).create(project_id=project, role="admin", name="t")
        cli_env = {
            **env,
            "AGENTFLEET_TOKEN": token.token,
            "AGENTFLEET_PROJECT": project,
            **{f"AGENTFLEET_{n.upper()}_ADDR": f"127.0.0.1:{p}" for n, p in ports.items()},
        }
        manifest = tmp_path / "product.yaml"
        manifest.write_text(MANIFEST)
        code, out, err = await _agentfleet(cli_env, "install", str(manifest))
        assert code == 0, out + err

        code, out, err = await _agentfleet(cli_env, "run", "greeter", "Say hello to Ada")
        assert code == 0, out + err
        code, out, err = await _agentfleet(
            cli_env, "run", "librarian", "Use list_entities to show what the graph holds"
        )
        assert code == 0, out + err
    finally:
        rest = await stop_up(up, data_dir=None)  # its database is the test's
    assert up.returncode == 0, rest

    runs = {
        row["agent_name"]: row
        for row in await db_pool.fetch(
            "SELECT agent_name, status, summary, id FROM kb.agent_runs WHERE project_id = $1",
            project,
        )
    }
    assert {name: row["status"] for name, row in runs.items()} == {
        "greeter": "completed",
        "librarian": "completed",
    }
    assert NOTICE in runs["greeter"]["summary"]
    assert "Say hello to Ada" in runs["greeter"]["summary"]

    calls = await db_pool.fetch(
        "SELECT tool_name, status FROM kb.agent_run_tool_calls WHERE run_id = $1",
        runs["librarian"]["id"],
    )
    assert [(c["tool_name"], c["status"]) for c in calls] == [("list_entities", "completed")]
    assert "Tool list_entities returned:" in runs["librarian"]["summary"]
