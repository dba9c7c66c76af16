"""Coordination on real processes (issue 6): the seed 001 research scenario with the
example product, and cancelling a run tree spread over two executor processes.

The fleet (toolpool, two executors, two histories) is shared by the session; the model is
the stub Gemini server in this process playing ``examples/products/research/stub_scripts``.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

from google.protobuf import json_format, struct_pb2

from agentfleet.gemini_stub import Call, Reply, Script
from agentfleet.graph.repository import GraphRepository
from agentfleet.testing.waiting import wait_for_query
from agentfleet.v1 import common_pb2, executor_pb2, history_pb2, registry_pb2
from examples.products.research.stub_scripts import TOPIC, research_scripts
from tests.e2e.conftest import Fleet

MANIFEST = Path(__file__).parents[2] / "examples/products/research/manifest.json"
CHILD_DELAY_S = 0.6
T = common_pb2.RunEventType


async def test_seed_001_research_scenario_end_to_end(fleet: Fleet) -> None:
    project = await fleet.project("research")
    manifest = json_format.ParseDict(json.loads(MANIFEST.read_text()), struct_pb2.Struct())
    await project.registry().InstallProduct(
        registry_pb2.InstallProductRequest(project_id=project.project_id, manifest=manifest)
    )
    await GraphRepository(fleet.pool).create_object(
        project.project_id,
        type="Document",
        properties={
            "title": "WebAssembly runtimes for serverless computing: a survey",
            "content": "Cold starts of WebAssembly server runtimes are measured in microseconds.",
        },
    )
    for script in research_scripts(child_delay_s=CHILD_DELAY_S):
        fleet.stub.add_script(script)

    stream = project.executor().StartRun(
        executor_pb2.StartRunRequest(
            project_id=project.project_id, agent_name="research-assistant", input=TOPIC
        )
    )
    async with asyncio.timeout(60):
        streamed = [event async for event in stream]
    final = streamed[-1].run_finished.run
    assert final.status == common_pb2.RUN_STATUS_COMPLETED, final.error_message
    root = final.id
    assert "Saved a ResearchReport citing" in final.summary

    pool = fleet.pool
    children = await pool.fetch(
        "SELECT * FROM kb.agent_runs WHERE parent_run_id = $1 ORDER BY created_at", root
    )
    assert sorted(c["agent_name"] for c in children) == [
        "paper-summarizer",
        "web-browser",
        "web-browser",
        "web-browser",
    ]
    assert {c["status"] for c in children} == {"completed"}
    assert {c["depth"] for c in children} == {1}
    assert {str(c["root_run_id"]) for c in children} == {root}
    # One trace for the whole tree, and each child below the spawn span.
    assert {c["trace_id"] for c in children} == {final.trace_id}
    assert all(c["trace_parent"].split("-")[1] == final.trace_id for c in children)

    # The spawn call recorded its children at spawn time.
    spawn = await pool.fetchrow(
        "SELECT * FROM kb.agent_run_tool_calls WHERE run_id = $1 AND tool_name = 'spawn_agents'",
        root,
    )
    assert spawn["status"] == "completed"
    assert sorted(map(str, spawn["child_run_ids"])) == sorted(str(c["id"]) for c in children)
    output = spawn["output"]["output"]
    assert len(output["results"]) == 4
    assert output["failed"] == []

    # Parallel: the spawn lasted about as long as the slowest child, not the sum.
    durations = [c["duration_ms"] for c in children]
    assert spawn["duration_ms"] < sum(durations) * 0.6, (spawn["duration_ms"], durations)
    assert spawn["duration_ms"] < max(durations) + 3000

    # Every child's conversation and tool calls are in the database.
    for child in children:
        calls = await pool.fetch(
            "SELECT tool_name, status FROM kb.agent_run_tool_calls WHERE run_id = $1",
            child["id"],
        )
        messages = await pool.fetchval(
            "SELECT count(*) FROM kb.agent_run_messages WHERE run_id = $1", child["id"]
        )
        assert messages >= 4
        names = sorted(c["tool_name"] for c in calls)
        if child["agent_name"] == "web-browser":
            assert names == ["web__web_fetch", "web__web_search"]
        else:
            assert names == ["search_hybrid"]
            assert "WebAssembly runtimes for serverless computing" in child["summary"]
        assert {c["status"] for c in calls} == {"completed"}

    # Events: four children started and finished on the parent.
    types = [e.type for e in streamed]
    assert types.count(T.RUN_EVENT_TYPE_CHILD_RUN_STARTED) == 4
    assert types.count(T.RUN_EVENT_TYPE_CHILD_RUN_FINISHED) == 4

    # The graph: a report citing every source.
    report = await pool.fetchrow(
        "SELECT id FROM kb.graph_objects WHERE project_id = $1 AND type = 'ResearchReport'",
        project.project_id,
    )
    sources = await pool.fetch(
        "SELECT id FROM kb.graph_objects WHERE project_id = $1 AND type = 'Source'",
        project.project_id,
    )
    cites = await pool.fetch(
        "SELECT dst_id FROM kb.graph_relationships WHERE project_id = $1 AND type = 'CITES' "
        "AND src_id = $2",
        project.project_id,
        report["id"],
    )
    assert len(sources) >= 3
    assert sorted(r["dst_id"] for r in cites) == sorted(s["id"] for s in sources)

    # The tree's token total is the root's own tokens plus its children's.
    row = await pool.fetchrow("SELECT * FROM kb.agent_runs WHERE id = $1", root)
    assert row["tokens_total_tree"] == row["tokens_in"] + row["tokens_out"] + sum(
        c["tokens_total_tree"] for c in children
    )
    # And its cost likewise (the research agents run priced Gemini models).
    assert all(c["cost_nanos"] > 0 for c in children)
    assert row["cost_total_tree_nanos"] == row["cost_nanos"] + sum(
        c["cost_total_tree_nanos"] for c in children
    )
    tree = await project.history().GetRunTree(
        history_pb2.GetRunTreeRequest(project_id=project.project_id, run_id=root)
    )
    assert tree.cost_total_nanos == row["cost_total_tree_nanos"]


async def test_cancel_root_cancels_four_children_on_two_executors(fleet: Fleet) -> None:
    marker = uuid.uuid4().hex[:8]
    project = await fleet.project("cancel-tree")
    await project.define(
        "boss", system_prompt=f"boss {marker}", tools=["spawn_agents", "list_available_agents"]
    )
    await project.define("sleeper", system_prompt=f"sleeper {marker}")
    tasks = [{"agent_name": "sleeper", "prompt": f"wait {i}"} for i in range(4)]
    fleet.stub.add_script(
        Script(
            name=f"boss-{marker}",
            match_system=f"boss {marker}",
            replies=[Reply(calls=[Call("spawn_agents", {"tasks": tasks})])],
        )
    )
    fleet.stub.add_script(
        Script(
            name=f"sleeper-{marker}", match_system=f"sleeper {marker}", replies=[Reply(hang=True)]
        )
    )
    root = await project.executor().TriggerRun(
        executor_pb2.StartRunRequest(project_id=project.project_id, agent_name="boss", input="go")
    )
    await wait_for_query(
        fleet.pool,
        "SELECT count(*) = 4 FROM kb.agent_runs r WHERE parent_run_id = $1 AND status = 'running'"
        " AND EXISTS (SELECT 1 FROM kb.agent_run_messages m WHERE m.run_id = r.id)",
        root.id,
    )
    owners = await fleet.pool.fetch(
        "SELECT lease_owner FROM kb.agent_runs WHERE root_run_id = $1", root.id
    )
    executors = {fleet.executor_named_by(r["lease_owner"]) for r in owners}

    await project.executor("executor-b").CancelRun(
        executor_pb2.CancelRunRequest(project_id=project.project_id, run_id=root.id)
    )
    await wait_for_query(
        fleet.pool,
        "SELECT bool_and(status = 'cancelled') AND count(*) = 5 FROM kb.agent_runs "
        "WHERE root_run_id = $1",
        root.id,
    )
    rows = await fleet.pool.fetch(
        "SELECT status, lease_owner, completed_at FROM kb.agent_runs WHERE root_run_id = $1",
        root.id,
    )
    assert all(r["completed_at"] is not None and r["lease_owner"] is None for r in rows)
    # The spawn call got its one answer.
    spawn = await fleet.pool.fetchrow(
        "SELECT status FROM kb.agent_run_tool_calls WHERE run_id = $1", root.id
    )
    assert spawn["status"] in ("failed", "interrupted")
    assert executors <= {"executor-a", "executor-b"}
