"""The README's triggers tour (grpcurl and the CLI), run as written against real service
processes, so the README cannot drift from the product."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from pathlib import Path

import asyncpg
import pytest

from agentfleet.gemini_stub import GeminiStub, Reply, Script
from agentfleet.testing.services import create_service_tokens, start_process_stack

ROOT = Path(__file__).parents[2]
DEFAULT_PORTS = {"executor": 50051, "toolpool": 50052, "history": 50054}


def tour_script() -> str:
    readme = (ROOT / "README.md").read_text()
    block = readme.split("<!-- triggers-tour:start -->", 1)[1]
    block = block.split("<!-- triggers-tour:end -->", 1)[0]
    return re.sub(r"^```\w*$", "", block, flags=re.MULTILINE)


@pytest.mark.timeout(180)
async def test_the_readme_triggers_tour_works_as_written(
    database_url: str, db_pool: asyncpg.Pool, gemini_stub: GeminiStub, tmp_path: Path
) -> None:
    gemini_stub.add_script(Script(name="book", policy=lambda request: Reply(text="booked")))
    names = ("toolpool", "history", "executor")
    stack = await start_process_stack(
        database_url=database_url,
        log_dir=tmp_path / "logs",
        names=names,
        environ={"AGENTFLEET_GEMINI_BASE_URL": gemini_stub.base_url or ""},
        service_tokens=await create_service_tokens(db_pool, names),
    )
    try:
        script = tour_script()
        for name, address in stack.addresses.items():
            script = script.replace(f"127.0.0.1:{DEFAULT_PORTS[name]}", address)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTFLEET_", "GEMINI"))}
        env.update({f"AGENTFLEET_{n.upper()}_ADDR": a for n, a in stack.addresses.items()})
        env["DATABASE_URL"] = database_url
        env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
        tour = await asyncio.create_subprocess_exec(
            "bash",
            "-euo",
            "pipefail",
            "-c",
            script,
            env=env,
            cwd=ROOT,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(tour.communicate(), 120)
        output = out.decode()
        assert tour.returncode == 0, output + err.decode()
    finally:
        await stack.stop(grace_s=5)

    # 2. the event was emitted once: the repeat names the same event
    assert '"created": true' in output
    assert "(already emitted under this request id)" in output
    # 3. one firing, one run, its input made from the payload
    listed = [json.loads(line) for line in output.splitlines() if line.startswith('{"runs"')]
    assert len(listed) == 1
    runs = listed[0]["runs"]
    assert [(r["agent_name"], r["started_by"]) for r in runs] == [("biller", "event")]
    assert runs[0]["input_preview"] == "Book invoice F-17"
    assert '"trigger": "on_event:invoice.paid"' in output
    # 4. the schedule showed its next fire times, was paused, resumed and removed
    assert '"upcoming_fire_times"' in output
    assert "schedule mornings: biller at '0 9 * * 1-5', paused" in output
    assert "deleted schedule mornings" in output
    assert await db_pool.fetchval("SELECT count(*) FROM kb.trigger_schedules") == 0
    assert await db_pool.fetchval("SELECT count(*) FROM kb.trigger_firings") == 1
