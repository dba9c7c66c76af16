"""`make run`'s scenario, non-interactively: `agentfleet up --demo --exit-when-ready`."""

import asyncio
import os
import re
import sys
from pathlib import Path

import asyncpg
import pytest

from agentfleet.testing.checks.invariants import assert_invariants
from agentfleet.testing.cli_process import start_agentfleet
from agentfleet.testing.services import free_port


@pytest.mark.timeout(300)
async def test_the_research_demo_reports_and_writes_the_graph(
    database_url: str, db_pool: asyncpg.Pool, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTFLEET_", "GEMINI"))}
    env.pop("GOOGLE_API_KEY", None)
    env.update(
        {
            "DATABASE_URL": database_url,
            "AGENTFLEET_DATA_DIR": str(tmp_path),
            **{f"AGENTFLEET_{n}_PORT": str(free_port()) for n in ("EXECUTOR", "TOOLPOOL")},
            **{f"AGENTFLEET_{n}_PORT": str(free_port()) for n in ("DISPATCHER", "HISTORY")},
            **{f"AGENTFLEET_{n}_PORT": str(free_port()) for n in ("A2A", "A2A_HTTP", "CONSOLE")},
        }
    )
    process = await start_agentfleet("up", "--demo", "--exit-when-ready", env=env)
    out, err = await asyncio.wait_for(process.communicate(), 240)
    output = out.decode()
    assert process.returncode == 0, output + err.decode()

    assert "offline stub Gemini server" in output
    assert "installed product research" in output
    assert "2 documents ingested: on_document_ingested starts the paper-summarizer" in output
    # The live tree marks each run the ingestion triggered, with what fired it.
    assert output.count("started by trigger on_document_ingested (Document ") >= 2, output
    assert "Saved a ResearchReport citing 3 Source entities" in output
    assert "Sources (3 CITES relationships)" in output
    assert "agentfleet.v1.HistoryService/ListRuns" in output
    # The pasted commands find grpcurl in a new shell: the venv's bin goes on PATH first.
    assert f'export PATH={Path(sys.executable).parent}:"$PATH"' in output
    assert output.rstrip().endswith("stopped")
    # The console's sign-in link for the demo project (issue 34): the token in the fragment.
    link = re.search(r"sign in to the demo project: (http://\S+)", output)
    assert link is not None, output
    assert re.fullmatch(
        rf"http://127\.0\.0\.1:{env['AGENTFLEET_CONSOLE_PORT']}/#/signin\?project=demo&token=\S+",
        link.group(1),
    )

    root = await db_pool.fetchrow(
        "SELECT * FROM kb.agent_runs WHERE project_id = 'demo' AND parent_run_id IS NULL"
        " AND started_by = 'rpc'"
    )
    assert (root["agent_name"], root["status"]) == ("research-assistant", "completed")
    children = await db_pool.fetch(
        "SELECT agent_name, status FROM kb.agent_runs WHERE parent_run_id = $1", root["id"]
    )
    assert sorted(c["agent_name"] for c in children) == ["paper-summarizer"] + ["web-browser"] * 3
    assert {c["status"] for c in children} == {"completed"}
    # The tree shown live is the tree in the database.
    assert output.count("web-browser") >= 3

    report = await db_pool.fetchrow(
        "SELECT * FROM kb.graph_objects WHERE project_id = 'demo' AND type = 'ResearchReport'"
    )
    cited = await db_pool.fetch(
        """SELECT s.properties FROM kb.graph_relationships r
           JOIN kb.graph_objects s ON s.id = r.dst_id
           WHERE r.project_id = 'demo' AND r.type = 'CITES' AND r.src_id = $1""",
        report["id"],
    )
    urls = sorted(c["properties"]["url"] for c in cited)
    assert len(urls) == 3
    assert all(url.startswith("https://offline.example/") for url in urls)
    for url in urls:
        assert url in output
    documents = await db_pool.fetchval(
        "SELECT count(*) FROM kb.graph_objects WHERE project_id = 'demo' AND type = 'Document'"
    )
    assert documents == 2
    # Each ingested document started the paper-summarizer once, followed to its end.
    triggered = await db_pool.fetch(
        "SELECT status, trigger_origin FROM kb.agent_runs"
        " WHERE project_id = 'demo' AND started_by = 'trigger'"
    )
    assert [r["status"] for r in triggered] == ["completed", "completed"]
    assert {r["trigger_origin"]["trigger"] for r in triggered} == {"on_document_ingested"}
    await assert_invariants(db_pool, project_id="demo")
    # The tokens up created for the demo and the services were revoked on the way out.
    assert (
        await db_pool.fetchval("SELECT count(*) FROM kb.api_tokens WHERE revoked_at IS NULL") == 0
    )
