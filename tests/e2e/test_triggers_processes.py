"""Agents that react, on the shared fleet of real processes (issue 32): a Document created
through the graph tools starts the research product's paper-summarizer once; a chain of
triggered runs stops at its cap; an external event starts its listener once, its payload as
data; an unknown trigger is refused at install, naming the field."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import json_format, struct_pb2

from agentfleet.gemini_stub import Call, Reply, Script, StubRequest
from agentfleet.testing.rpc_errors import field_violations, rpc_error
from agentfleet.testing.waiting import wait_for_query
from agentfleet.v1 import (
    common_pb2,
    executor_pb2,
    history_pb2,
    registry_pb2,
    triggers_pb2,
    triggers_pb2_grpc,
)
from tests.e2e.conftest import Fleet, Project

RESEARCH = Path(__file__).parents[2] / "examples/products/research/manifest.json"


def triggers(project: Project, name: str = "executor-a") -> triggers_pb2_grpc.TriggerServiceStub:
    return triggers_pb2_grpc.TriggerServiceStub(project.fleet.channel(name, project.token))


async def upsert(project: Project, name: str, marker: str, **fields: Any) -> None:
    config = fields.pop("config", None)
    definition = common_pb2.AgentDefinition(
        name=name,
        system_prompt=f"{name} {marker}",
        model=common_pb2.ModelConfig(name="gemini-e2e"),
        **fields,
    )
    if config is not None:
        definition.config.update(config)
    await project.registry().UpsertAgentDefinition(
        registry_pb2.UpsertAgentDefinitionRequest(
            project_id=project.project_id, agent_definition=definition
        )
    )


def creates(type_: str, then: str) -> Any:
    """A policy: create one entity of ``type_``, then answer ``then``."""

    def policy(request: StubRequest) -> Reply:
        if request.turn == 0:
            return Reply(calls=[Call("create_entity", {"type": type_, "properties": {"n": 1}})])
        return Reply(text=then)

    return policy


async def test_a_document_from_the_graph_tools_starts_the_paper_summarizer_once(
    fleet: Fleet,
) -> None:
    project = await fleet.project("ingest")
    marker = f"[{project.project_id}]"
    manifest = json.loads(RESEARCH.read_text())
    for agent in manifest["agents"]:
        agent["system_prompt"] += f" {marker}-{agent['name']}"
    document = struct_pb2.Struct()
    document.update(manifest)
    await project.registry().InstallProduct(
        registry_pb2.InstallProductRequest(project_id=project.project_id, manifest=document)
    )
    await upsert(project, "ingester", marker, tools=["create_entity"])
    fleet.stub.add_script(
        Script(
            name=f"{marker}-ingester",
            match_system=f"ingester {marker}",
            policy=creates("Document", "ingested"),
        )
    )
    fleet.stub.add_script(
        Script(
            name=f"{marker}-summarizer",
            match_system=f"{marker}-paper-summarizer",
            policy=lambda request: Reply(text="A summary."),
        )
    )
    ingest = await project.executor().TriggerRun(
        executor_pb2.StartRunRequest(
            project_id=project.project_id, agent_name="ingester", input="store a paper"
        )
    )
    summarized = await wait_for_query(
        fleet.pool,
        "SELECT id FROM kb.agent_runs WHERE project_id = $1 AND agent_name = 'paper-summarizer'"
        " AND status = 'completed'",
        project.project_id,
        timeout_s=60,
    )
    doc_id = await fleet.pool.fetchval(
        "SELECT id::text FROM kb.graph_objects WHERE project_id = $1 AND type = 'Document'",
        project.project_id,
    )
    run = (
        await project.history().GetRun(
            history_pb2.GetRunRequest(project_id=project.project_id, run_id=str(summarized))
        )
    ).run
    assert run.started_by == "trigger"
    assert run.chain_depth == 1  # the ingester was started by an RPC
    origin = json_format.MessageToDict(run.trigger_origin)
    assert origin["object_id"] == doc_id
    assert origin["trigger"] == "on_document_ingested"
    assert origin["source_run_id"] == ingest.id
    listed = await project.history().ListRuns(
        history_pb2.ListRunsRequest(project_id=project.project_id, started_by="trigger")
    )
    assert [r.id for r in listed.runs] == [str(summarized)]
    assert listed.runs[0].started_by == "trigger"
    firings = await triggers(project, "executor-b").ListTriggerFirings(
        triggers_pb2.ListTriggerFiringsRequest(project_id=project.project_id)
    )
    assert [(f.agent_name, f.outcome, f.run_id, f.object_id) for f in firings.firings] == [
        ("paper-summarizer", "fired", str(summarized), doc_id)
    ]
    # Once: the outbox is drained and no second run of the summarizer appeared.
    await wait_for_query(
        fleet.pool,
        "SELECT count(*) = 0 FROM kb.trigger_outbox WHERE project_id = $1 AND consumed_at IS NULL",
        project.project_id,
    )
    assert (
        await fleet.pool.fetchval(
            "SELECT count(*) FROM kb.agent_runs WHERE project_id = $1"
            " AND agent_name = 'paper-summarizer'",
            project.project_id,
        )
        == 1
    )


async def test_a_chain_of_triggered_runs_stops_at_its_cap(fleet: Fleet) -> None:
    project = await fleet.project("chain")
    marker = f"[{project.project_id}]"
    await upsert(project, "seeder", marker, tools=["create_entity"])
    await upsert(project, "echo", marker, tools=["create_entity"], trigger="on_object_created:Note")
    for name in ("seeder", "echo"):
        fleet.stub.add_script(
            Script(
                name=f"{marker}-{name}",
                match_system=f"{name} {marker}",
                policy=creates("Note", "noted"),
            )
        )
    await project.executor().TriggerRun(
        executor_pb2.StartRunRequest(
            project_id=project.project_id, agent_name="seeder", input="start"
        )
    )
    reason = await wait_for_query(
        fleet.pool,
        "SELECT reason FROM kb.trigger_firings WHERE project_id = $1 AND outcome = 'skipped'",
        project.project_id,
        timeout_s=90,
    )
    assert reason.startswith("chain_depth_cap: chain depth 4")
    depths = await fleet.pool.fetch(
        "SELECT chain_depth FROM kb.agent_runs WHERE project_id = $1 AND agent_name = 'echo'"
        " ORDER BY chain_depth",
        project.project_id,
    )
    assert [row["chain_depth"] for row in depths] == [1, 2, 3]


async def test_an_event_starts_its_listener_once_with_the_payload_as_data(fleet: Fleet) -> None:
    project = await fleet.project("events")
    marker = f"[{project.project_id}]"
    await upsert(
        project,
        "biller",
        marker,
        trigger="on_event:invoice.paid",
        config={"trigger_input": "Invoice {{payload.number}} paid by {{payload.who}}"},
    )
    fleet.stub.add_script(
        Script(
            name=f"{marker}-biller",
            match_system=f"biller {marker}",
            policy=lambda r: Reply(text="booked"),
        )
    )
    payload = struct_pb2.Struct()
    # Template text inside a payload stays text: it is data, never read as a template.
    payload.update({"number": "F-17", "who": "{{object.id}} {{payload}}"})
    request = triggers_pb2.EmitEventRequest(
        project_id=project.project_id, name="invoice.paid", payload=payload, request_id="pay-17"
    )
    first = await triggers(project).EmitEvent(request)
    again = await triggers(project, "executor-b").EmitEvent(request)
    assert first.created
    assert not again.created
    assert again.event_id == first.event_id
    other = copy.deepcopy(request)
    other.payload.update({"number": "F-18"})
    refused = await rpc_error(triggers(project).EmitEvent(other))
    assert refused.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "request_id" in field_violations(refused)
    run_input = await wait_for_query(
        fleet.pool,
        "SELECT input FROM kb.agent_runs WHERE project_id = $1 AND agent_name = 'biller'",
        project.project_id,
    )
    assert run_input == "Invoice F-17 paid by {{object.id}} {{payload}}"
    await wait_for_query(
        fleet.pool,
        "SELECT count(*) = 0 FROM kb.trigger_outbox WHERE project_id = $1 AND consumed_at IS NULL",
        project.project_id,
    )
    runs = await fleet.pool.fetch(
        "SELECT started_by, trigger_origin FROM kb.agent_runs WHERE project_id = $1",
        project.project_id,
    )
    assert len(runs) == 1
    assert runs[0]["started_by"] == "event"
    assert runs[0]["trigger_origin"]["request_id"] == "pay-17"


async def test_an_unknown_trigger_is_refused_at_install(fleet: Fleet) -> None:
    project = await fleet.project("refuse")
    manifest = {
        "name": "sunrise",
        "version": "1.0.0",
        "agents": [
            {"name": "riser", "model": {"name": "gemini-e2e"}, "trigger": "on_sunrise"},
            {
                "name": "watcher",
                "model": {"name": "gemini-e2e"},
                "trigger": "on_object_created:SpecTask",
            },
        ],
    }
    document = struct_pb2.Struct()
    document.update(manifest)
    refused = await rpc_error(
        project.registry().InstallProduct(
            registry_pb2.InstallProductRequest(project_id=project.project_id, manifest=document)
        )
    )
    assert refused.code() == grpc.StatusCode.INVALID_ARGUMENT
    fields = field_violations(refused)
    assert "unknown trigger 'on_sunrise'" in fields["manifest.agents[0].trigger"]
    assert "dispatcher" in fields["manifest.agents[1].trigger"]
    assert (
        await fleet.pool.fetchval(
            "SELECT count(*) FROM kb.products WHERE project_id = $1", project.project_id
        )
        == 0
    )
