"""Internal events and messages (issue 37, item 3; seed 004 "Visibility") through gRPC on the
in-process services with the stub Gemini: what the platform injects (a doom-loop warning,
the soft stop's request, a resume's default note, a structured-output repair, the approval
re-queue and its continuation, a routing lookup) is stored with ``is_internal`` and hidden
from WatchRun, ListRunMessages and the CLI unless ``include_internal`` asks; a model's
thoughts are stored events, shown by default."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import asyncpg

from agentfleet.gemini_stub import Call, Reply, Script, StubRequest
from agentfleet.testing.checks.invariants import assert_invariants
from agentfleet.testing.waiting import wait_for_query
from agentfleet.v1 import (
    common_pb2,
    executor_pb2,
    history_pb2,
    registry_pb2,
    registry_pb2_grpc,
)
from tests.e2e.cli_harness import Cli, cli
from tests.integration.approval_harness import PROJECT, Deployment, deployment

__all__ = ["cli", "deployment"]

T = common_pb2.RunEventType
PAUSED = "SELECT status = 'paused' FROM kb.agent_runs WHERE id = $1"
DONE = "SELECT status IN ('completed', 'failed') FROM kb.agent_runs WHERE id = $1"
LOOP = {"type": "Note"}


def _looper(request: StubRequest) -> Reply:
    """Thinks, then looks up agents and lists the same notes three times in a row (the
    third is not run: a doom-loop warning); then answers."""
    turn = request.turn
    if turn == 0:
        return Reply(thought="Who can help? Let me look.", calls=[Call("list_available_agents")])
    if 1 <= turn <= 3:
        return Reply(calls=[Call("list_entities", LOOP)])
    return Reply(text="looked enough")


async def _watch(deployment: Deployment, run_id: str, **fields: Any) -> list[Any]:
    history = deployment.history()
    async with asyncio.timeout(20):
        return [
            e
            async for e in history.WatchRun(
                history_pb2.WatchRunRequest(project_id=PROJECT, run_id=run_id, **fields)
            )
        ]


async def _messages(deployment: Deployment, run_id: str, **fields: Any) -> list[Any]:
    reply = await deployment.history().ListRunMessages(
        history_pb2.ListRunMessagesRequest(project_id=PROJECT, run_id=run_id, **fields)
    )
    return list(reply.messages)


async def _stored(pool: asyncpg.Pool, run_id: str) -> list[tuple[str, bool, Any]]:
    rows = await pool.fetch(
        "SELECT type, is_internal, payload FROM kb.agent_run_events_shown"
        " WHERE run_id = $1 ORDER BY seq",
        run_id,
    )
    return [(r["type"], r["is_internal"], r["payload"]) for r in rows]


async def test_a_doom_loop_warning_and_a_routing_lookup_are_internal_thoughts_are_shown(
    deployment: Deployment,
) -> None:
    deployment.stub.add_script(Script(name="looper", match_system="You loop.", policy=_looper))
    await deployment.define(
        "looper", system_prompt="You loop.", tools=["list_entities", "list_available_agents"]
    )
    run_id = await deployment.trigger("looper", input="look around")
    await wait_for_query(deployment.pool, DONE, run_id)

    stored = await _stored(deployment.pool, run_id)
    internal = [(t, p.get("kind") or p.get("tool_name")) for t, i, p in stored if i]
    assert internal == [
        ("tool_request", "list_available_agents"),
        ("tool_response", "list_available_agents"),
        ("safety", "doom_loop_warning"),
    ]
    shown = await _watch(deployment, run_id)
    everything = await _watch(deployment, run_id, include_internal=True)
    assert len(everything) == len(stored)
    assert [e.seq for e in everything if e.is_internal] == [
        seq for seq, (_, i, _) in enumerate(stored, start=1) if i
    ]
    assert [e for e in everything if not e.is_internal] == shown
    assert not any(e.type == T.RUN_EVENT_TYPE_SAFETY for e in shown)
    # The refused third call keeps its request and answer in view (every request is answered).
    assert [e.tool_request.tool_name for e in shown if e.HasField("tool_request")] == [
        "list_entities"
    ] * 3
    # The routing lookup's call row is listed only when asked for, like its events.
    history = deployment.history()
    calls = await history.ListRunToolCalls(
        history_pb2.ListRunToolCallsRequest(project_id=PROJECT, run_id=run_id)
    )
    assert [c.tool_name for c in calls.tool_calls] == ["list_entities"] * 3
    every_call = await history.ListRunToolCalls(
        history_pb2.ListRunToolCallsRequest(
            project_id=PROJECT, run_id=run_id, include_internal=True
        )
    )
    assert [c.tool_name for c in every_call.tool_calls] == [
        "list_available_agents",
        *["list_entities"] * 3,
    ]
    # The thought is a stored MODEL_TEXT, shown by default.
    (thought,) = [e for e in shown if e.HasField("model_text") and e.model_text.thought]
    assert thought.model_text.text == "Who can help? Let me look."
    await assert_invariants(deployment.pool, project_id=PROJECT)


async def test_the_soft_stops_request_and_a_resumes_default_note_are_internal_messages(
    deployment: Deployment,
) -> None:
    replies = [
        Reply(calls=[Call("list_entities", {"type": "A"})]),
        Reply(text="summary: listed A"),
        Reply(text="done after the resume"),
    ]
    deployment.stub.add_script(Script(name="short", match_system="You stop.", replies=replies))
    await deployment.define("short", system_prompt="You stop.", tools=["list_entities"])
    run_id = await deployment.trigger("short", input="list A", max_steps=1)
    await wait_for_query(deployment.pool, PAUSED, run_id)
    executor = deployment.executor()
    async with asyncio.timeout(20):
        async for _ in executor.ResumeRun(
            executor_pb2.ResumeRunRequest(project_id=PROJECT, run_id=run_id)
        ):
            pass

    shown = await _messages(deployment, run_id)
    every = await _messages(deployment, run_id, include_internal=True)
    hidden = [m for m in every if m.is_internal]
    assert [m.role for m in hidden] == [common_pb2.MESSAGE_ROLE_USER] * 2
    assert "summar" in hidden[0].preview.lower()  # the soft stop's request
    assert hidden[1].preview == "continue"  # the resume's default note
    assert [m.seq for m in shown] == [m.seq for m in every if not m.is_internal]
    assert all(not m.is_internal for m in shown)
    # The model still saw them: they are part of its conversation.
    last = deployment.stub.requests_for("short")[-1]
    texts = [p.get("text", "") for c in last.contents for p in c.get("parts") or []]
    assert "continue" in texts
    # A resume with input is the caller's own message: not internal.
    user_inputs = [m for m in every if m.role == common_pb2.MESSAGE_ROLE_USER]
    assert not user_inputs[0].is_internal  # "list A"


async def test_a_structured_output_repair_prompt_is_internal(deployment: Deployment) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    replies = [Reply(text="not json"), Reply(text=json.dumps({"n": 1}))]
    deployment.stub.add_script(Script(name="typed", match_system="You type.", replies=replies))
    await deployment.define("typed", system_prompt="You type.", output_schema=schema)
    run_id = await deployment.trigger("typed", input="count")
    await wait_for_query(deployment.pool, DONE, run_id)

    every = await _messages(deployment, run_id, include_internal=True)
    (repair,) = [m for m in every if m.is_internal]
    assert "not JSON" in repair.preview
    assert repair.seq not in [m.seq for m in await _messages(deployment, run_id)]


async def test_the_approval_requeue_and_its_continuation_are_internal(
    deployment: Deployment,
) -> None:
    await deployment.define_clerk()
    run_id = await deployment.trigger("clerk", input="make the note")
    held = await deployment.held_call(run_id)
    await deployment.executor().DecideToolCall(
        deployment.decision(
            run_id, held["tool_call_id"], decision=executor_pb2.TOOL_CALL_DECISION_APPROVE
        )
    )
    await wait_for_query(deployment.pool, DONE, run_id)

    stored = await _stored(deployment.pool, run_id)
    changes = [(p["from_status"], p["to_status"], i) for t, i, p in stored if t == "status_changed"]
    assert ("running", "waiting", False) in changes  # a person has to act: shown
    assert ("waiting", "queued", True) in changes
    assert ("queued", "running", True) in changes[1:]  # the continuation's claim
    shown = await _watch(deployment, run_id)
    assert not any(e.is_internal for e in shown)
    assert len(shown) == len(stored) - sum(1 for _, i, _ in stored if i)


async def test_the_cli_shows_internal_plumbing_only_when_asked(
    cli: Cli,
    gemini_stub: Any,
) -> None:
    gemini_stub.add_script(Script(name="looper", match_system="You loop.", policy=_looper))
    replies = [Reply(calls=[Call("list_entities", {"type": "A"})]), Reply(text="summary")]
    gemini_stub.add_script(Script(name="short", match_system="You stop.", replies=replies))
    await _define_over_grpc(cli, "looper", "You loop.")
    await _define_over_grpc(cli, "short", "You stop.")

    plain = await cli.json_lines("run", "looper", "look around")
    internal = await cli.json_lines("run", "looper", "look around", "--internal")
    kinds = [e["safety"].get("kind") for e in internal if "safety" in e]
    assert "SAFETY_KIND_DOOM_LOOP_WARNING" in kinds
    assert not any(e.get("is_internal") for e in plain)
    assert any(e.get("is_internal") for e in internal)

    stopped = await cli.json_lines("run", "short", "list A", "--max-steps", "1")
    run_id = stopped[0]["run_id"]
    (shown,) = await cli.json_lines("show", run_id, "--messages")
    (every,) = await cli.json_lines("show", run_id, "--messages", "--internal")
    hidden = [m for m in every["messages"] if m.get("is_internal")]
    assert len(hidden) == 1  # the soft stop's request
    assert len(every["messages"]) == len(shown["messages"]) + 1
    assert not any(m.get("is_internal") for m in shown["messages"])


async def _define_over_grpc(cli: Cli, name: str, prompt: str) -> None:
    registry = registry_pb2_grpc.AgentRegistryServiceStub(
        cli.stack.channel("executor", token=cli.environ["AGENTFLEET_TOKEN"])
    )
    await registry.UpsertAgentDefinition(
        registry_pb2.UpsertAgentDefinitionRequest(
            project_id=cli.environ["AGENTFLEET_PROJECT"],
            agent_definition=common_pb2.AgentDefinition(
                name=name,
                system_prompt=prompt,
                model=common_pb2.ModelConfig(name="gemini-2.5-flash"),
                tools=["list_entities", "list_available_agents"],
                visibility=common_pb2.VISIBILITY_EXTERNAL,
            ),
        )
    )
