"""The executor as real processes (issue 4, "What it must show"): a toolpool, two executors
and two histories started with ``python -m``, auth on, the stub Gemini server as the model.

Everything the tests assert is read back from the database or from the processes' own
streams; waits are on streams and conditions with deadlines, never on sleeps.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter
from collections.abc import AsyncIterable
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from agentfleet import events
from agentfleet.gemini_stub import Call, Reply, Script, StubRequest, Usage
from agentfleet.llm import content_to_json
from agentfleet.testing.streams import stored_events_of
from agentfleet.v1 import common_pb2, executor_pb2, history_pb2, toolpool_pb2
from services.executor.run_path.recovery import load_conversation
from tests.e2e.conftest import EXECUTORS, Fleet, Project

TEST_SERVER = str(Path(__file__).parents[2] / "examples" / "mcp" / "test_server" / "server.py")
T = common_pb2.RunEventType


async def collect(stream: AsyncIterable[common_pb2.RunEvent], timeout_s: float = 20.0) -> list:
    """Every event of a stream that must end within ``timeout_s``."""
    async with asyncio.timeout(timeout_s):
        return [event async for event in stream]


async def stored_protos(fleet: Fleet, project_id: str, run_id: str) -> list[common_pb2.RunEvent]:
    """The run's events as the database holds them, in their wire form."""
    row = await fleet.pool.fetchrow("SELECT * FROM kb.agent_runs WHERE id = $1", run_id)
    parent = str(row["parent_run_id"]) if row["parent_run_id"] else None
    stored = await events.read_events(fleet.pool, project_id=project_id, run_id=run_id)
    return [events.to_proto(e, parent_run_id=parent, trace_id=row["trace_id"]) for e in stored]


def start(project: Project, agent: str, text: str = "go", **kwargs: Any):  # type: ignore[no-untyped-def]
    return executor_pb2.StartRunRequest(
        project_id=project.project_id, agent_name=agent, input=text, **kwargs
    )


def entity_ids(request: StubRequest) -> list[str]:
    """The ids of the entities create_entity returned, from the conversation the model got."""
    ids = []
    for response in request.function_responses():
        entity = response.get("response", {}).get("output", {}).get("entity")
        if entity is None:
            raise AssertionError(f"create_entity did not answer an entity: {response}")
        ids.append(entity["id"])
    return ids


async def test_two_tools_then_one_then_answer_all_persisted_as_streamed(fleet: Fleet) -> None:
    project = await fleet.project("tools")
    marker = f"[{project.project_id}]"
    await project.define(
        "builder",
        system_prompt=f"You build graphs. {marker}",
        tools=["create_entity", "create_relationship"],
    )

    def policy(request: StubRequest) -> Reply:
        match request.turn:
            case 0:
                people = [("ada", "Ada"), ("grace", "Grace")]
                calls = [
                    Call("create_entity", {"type": "Person", "key": k, "properties": {"name": n}})
                    for k, n in people
                ]
                return Reply(text="Two people first.", calls=calls, usage=Usage(100, 7))
            case 1:
                src, dst = entity_ids(request)
                link = Call("create_relationship", {"type": "knows", "src_id": src, "dst_id": dst})
                return Reply(calls=[link], usage=Usage(200, 5))
            case _:
                return Reply(text="Ada knows Grace.", usage=Usage(300, 4))

    fleet.stub.add_script(Script(name=marker, match_system=marker, policy=policy))
    streamed = stored_events_of(
        await collect(project.executor().StartRun(start(project, "builder")))
    )

    run_id = streamed[0].run_id
    final = streamed[-1]
    assert final.type == T.RUN_EVENT_TYPE_RUN_FINISHED
    run = final.run_finished.run
    assert run.status == common_pb2.RUN_STATUS_COMPLETED, run.error_message
    assert run.summary == "Ada knows Grace."
    assert (run.step_count, run.tokens_in, run.tokens_out) == (3, 600, 16)

    # Events: the stream is the database, event for event.
    assert [e.seq for e in streamed] == list(range(1, len(streamed) + 1))
    assert streamed == await stored_protos(fleet, project.project_id, run_id)
    kinds = [e.type for e in streamed]
    assert kinds.count(T.RUN_EVENT_TYPE_RUN_STARTED) == 1
    requests = [e.tool_request for e in streamed if e.type == T.RUN_EVENT_TYPE_TOOL_REQUEST]
    responses = [e.tool_response for e in streamed if e.type == T.RUN_EVENT_TYPE_TOOL_RESPONSE]
    assert [(r.step, r.tool_name) for r in requests] == [
        (1, "create_entity"),
        (1, "create_entity"),
        (2, "create_relationship"),
    ]
    assert sorted(r.tool_call_id for r in requests) == sorted(r.tool_call_id for r in responses)
    assert {r.status for r in responses} == {common_pb2.TOOL_CALL_STATUS_COMPLETED}

    # Counters on the row, as RUN_FINISHED reported them.
    row = await fleet.pool.fetchrow("SELECT * FROM kb.agent_runs WHERE id = $1", run_id)
    assert (row["status"], row["summary"], row["step_count"]) == ("completed", run.summary, 3)
    assert (row["tokens_in"], row["tokens_out"]) == (600, 16)
    assert row["completed_at"] is not None
    assert row["duration_ms"] is not None

    # Tool calls: one row per request, with the arguments the model sent and the results
    # the model was given.
    calls = await fleet.pool.fetch(
        "SELECT * FROM kb.agent_run_tool_calls WHERE run_id = $1 ORDER BY created_at, tool_name",
        run_id,
    )
    by_id = {c["tool_call_id"]: c for c in calls}
    assert set(by_id) == {r.tool_call_id for r in requests}
    for request in requests:
        stored = by_id[request.tool_call_id]
        assert stored["tool_name"] == request.tool_name
        assert stored["step_number"] == request.step
        assert stored["status"] == "completed"
        assert stored["duration_ms"] is not None
        assert stored["input"] == json_format.MessageToDict(request.arguments)
    for response in responses:
        assert by_id[response.tool_call_id]["output"] == json_format.MessageToDict(response.result)
    link = next(c for c in calls if c["tool_name"] == "create_relationship")
    relationship = link["output"]["output"]["relationship"]
    people = await fleet.pool.fetch(
        "SELECT id::text, key FROM kb.graph_objects WHERE project_id = $1 ORDER BY key",
        project.project_id,
    )
    assert [p["key"] for p in people] == ["ada", "grace"]
    assert (relationship["src_id"], relationship["dst_id"]) == tuple(p["id"] for p in people)

    # Messages: one row per turn, numbered by step, tokens of each model reply.
    messages = await fleet.pool.fetch(
        "SELECT role, step_number, tokens FROM kb.agent_run_messages WHERE run_id = $1 "
        "ORDER BY seq",
        run_id,
    )
    assert [(m["role"], m["step_number"]) for m in messages] == [
        ("system", 0),
        ("user", 0),
        ("model", 1),
        ("tool", 1),
        ("model", 2),
        ("tool", 2),
        ("model", 3),
    ]
    assert [m["tokens"] for m in messages if m["role"] == "model"] == [7, 5, 4]

    # The conversation rebuilt from agent_run_messages is what the model was last sent,
    # plus its final answer.
    system, contents = await load_conversation(
        fleet.pool, project_id=project.project_id, run_id=run_id
    )
    last = fleet.stub.requests_for(marker)[-1]
    assert len(fleet.stub.requests_for(marker)) == 3
    assert system == last.system_instruction
    assert [content_to_json(c) for c in contents[:-1]] == [
        content_to_json(c) for c in last.typed_contents()
    ]
    assert [p.text for p in contents[-1].parts or []] == ["Ada knows Grace."]


async def test_fifty_triggered_runs_on_two_executors_run_exactly_once(fleet: Fleet) -> None:
    project = await fleet.project("fifty")
    marker = f"[{project.project_id}]"
    await project.define("worker", system_prompt=f"You work. {marker}", tools=["create_entity"])
    # Each run: a tool call, then an answer. The delay keeps runs alive long enough that one
    # executor's 16 slots cannot take all 50 alone.
    fleet.stub.add_script(
        Script(
            name=marker,
            match_system=marker,
            per_conversation=True,
            replies=[
                Reply(calls=[Call("create_entity", {"type": "Job"})], delay_s=0.2),
                Reply(text="done", delay_s=0.2),
            ],
        )
    )
    api = [project.executor(name) for name in EXECUTORS]
    inputs = [f"job-{i:02d}" for i in range(50)]
    runs = await asyncio.gather(
        *(api[i % 2].TriggerRun(start(project, "worker", text)) for i, text in enumerate(inputs))
    )
    ids = {run.id for run in runs}
    assert len(ids) == 50

    async with asyncio.timeout(30):
        while True:
            rows = await fleet.pool.fetch(
                "SELECT status, count(*) FROM kb.agent_runs WHERE project_id = $1 GROUP BY 1",
                project.project_id,
            )
            counts = {r["status"]: r["count"] for r in rows}
            if counts.get("completed", 0) + counts.get("failed", 0) == 50:
                break
            await asyncio.sleep(0.05)
    assert counts == {"completed": 50}

    # Exactly one start per run, by one of the two processes; both took part.
    started = await fleet.pool.fetch(
        "SELECT e.run_id::text, e.payload FROM kb.agent_run_events e "
        "JOIN kb.agent_runs r ON r.id = e.run_id WHERE r.project_id = $1 AND e.type = $2",
        project.project_id,
        "run_started",
    )
    assert sorted(r["run_id"] for r in started) == sorted(ids)
    owners = Counter(fleet.executor_named_by(r["payload"]["worker"]) for r in started)
    assert set(owners) == set(EXECUTORS), owners
    # Each conversation reached the model exactly as scripted: two requests, turns 0 and 1.
    turns = Counter(
        (r.typed_contents()[0].parts[0].text, r.turn)  # type: ignore[index]
        for r in fleet.stub.requests_for(marker)
    )
    assert turns == Counter({(text, turn): 1 for text in inputs for turn in (0, 1)})
    steps = await fleet.pool.fetch(
        "SELECT step_count, (SELECT count(*) FROM kb.agent_run_tool_calls t WHERE t.run_id = r.id)"
        " AS calls FROM kb.agent_runs r WHERE project_id = $1",
        project.project_id,
    )
    assert {(s["step_count"], s["calls"]) for s in steps} == {(2, 1)}


async def test_cancel_mid_tool_call_on_the_other_executor(fleet: Fleet) -> None:
    project = await fleet.project("cancel")
    marker = f"[{project.project_id}]"
    await project.toolpool().UpsertMcpServer(
        toolpool_pb2.UpsertMcpServerRequest(
            project_id=project.project_id,
            mcp_server=toolpool_pb2.McpServer(
                name="test",
                transport=toolpool_pb2.MCP_TRANSPORT_STDIO,
                command=sys.executable,
                args=[TEST_SERVER, "--transport", "stdio"],
            ),
        )
    )
    await project.define("sleeper", system_prompt=f"You wait. {marker}", tools=["test__slow"])
    fleet.stub.add_script(
        Script(
            name=marker,
            match_system=marker,
            replies=[Reply(text="Half done.", calls=[Call("test__slow", {"seconds": 60})])],
        )
    )
    run = await project.executor("executor-a").TriggerRun(start(project, "sleeper"))
    stream = project.history().WatchRun(
        history_pb2.WatchRunRequest(project_id=project.project_id, run_id=run.id)
    )
    seen: list[common_pb2.RunEvent] = []
    async with asyncio.timeout(20):
        async for event in stream:
            seen.append(event)
            if event.type == T.RUN_EVENT_TYPE_TOOL_REQUEST:
                break
    workers = [e.run_started.worker for e in seen if e.type == T.RUN_EVENT_TYPE_RUN_STARTED]
    assert len(workers) == 1, seen
    owner = fleet.executor_named_by(workers[0])
    # The tool call is under way (the MCP server has it, or is starting to); the cancel
    # goes to the executor that does NOT run the run.
    other = next(name for name in EXECUTORS if name != owner)
    began = time.monotonic()
    reply = await project.executor(other).CancelRun(
        executor_pb2.CancelRunRequest(project_id=project.project_id, run_id=run.id, reason="stop")
    )
    assert reply.run.HasField("cancel_request_time")
    async with asyncio.timeout(1.0):
        async for event in stream:
            seen.append(event)
    elapsed = time.monotonic() - began
    assert elapsed < 1.0
    final = seen[-1]
    assert final.type == T.RUN_EVENT_TYPE_RUN_FINISHED
    assert final.run_finished.run.status == common_pb2.RUN_STATUS_CANCELLED
    row = await fleet.pool.fetchrow("SELECT * FROM kb.agent_runs WHERE id = $1", run.id)
    assert (row["status"], row["summary"]) == ("cancelled", "Half done.")
    assert row["completed_at"] is not None
    assert row["duration_ms"] is not None
    request = next(e.tool_request for e in seen if e.type == T.RUN_EVENT_TYPE_TOOL_REQUEST)
    answers = [e.tool_response for e in seen if e.type == T.RUN_EVENT_TYPE_TOOL_RESPONSE]
    assert [a.tool_call_id for a in answers] == [request.tool_call_id]
    assert answers[0].status == common_pb2.TOOL_CALL_STATUS_FAILED
    assert "stop" in answers[0].error
    call = await fleet.pool.fetchrow(
        "SELECT status FROM kb.agent_run_tool_calls WHERE run_id = $1", run.id
    )
    assert call["status"] == "failed"
    assert seen == await stored_protos(fleet, project.project_id, run.id)


async def test_request_ids_unknown_agents_missing_tools_and_model_errors(fleet: Fleet) -> None:
    project = await fleet.project("edges")
    api = project.executor("executor-b")

    # Unknown agent: NOT_FOUND naming it, and no run.
    with pytest.raises(grpc.aio.AioRpcError) as missing:
        await api.TriggerRun(start(project, "nobody"))
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND
    assert "nobody" in (missing.value.details() or "")

    # A whitelisted tool that does not exist fails the run at start, naming it.
    ghost = f"[{project.project_id}-ghost]"
    await project.define("ghostly", system_prompt=ghost, tools=["create_entity", "no_such_tool"])
    failed = stored_events_of(await collect(api.StartRun(start(project, "ghostly"))))
    run = failed[-1].run_finished.run
    assert run.status == common_pb2.RUN_STATUS_FAILED
    assert "no_such_tool" in run.error_message
    assert not [r for r in fleet.stub.requests if ghost in r.system_instruction]

    # The same request_id twice: one run, streamed whole both times.
    echo = f"[{project.project_id}-echo]"
    await project.define("echo", system_prompt=echo)
    fleet.stub.add_script(Script(name=echo, match_system=echo, replies=[Reply(text="once")]))
    first = stored_events_of(await collect(api.StartRun(start(project, "echo", request_id="same"))))
    assert first[-1].run_finished.run.summary == "once", first[-1]
    again = await project.executor("executor-a").TriggerRun(
        start(project, "echo", request_id="same")
    )
    replayed = stored_events_of(
        await collect(api.StartRun(start(project, "echo", request_id="same")))
    )
    assert again.id == first[0].run_id
    assert again.status == common_pb2.RUN_STATUS_COMPLETED
    assert replayed == first
    assert fleet.stub.used(echo) == 1

    # A 429, then success: retried, completed.
    limited = f"[{project.project_id}-429]"
    await project.define("limited", system_prompt=limited)
    fleet.stub.add_script(
        Script(
            name=limited,
            match_system=limited,
            replies=[Reply(error_status=429), Reply(text="after the limit")],
        )
    )
    events_ = stored_events_of(await collect(api.StartRun(start(project, "limited"))))
    run = events_[-1].run_finished.run
    assert (run.status, run.summary) == (common_pb2.RUN_STATUS_COMPLETED, "after the limit")
    assert fleet.stub.used(limited) == 2

    # Five 500s (the fleet allows five attempts per model call): the run fails with the
    # model's own error.
    broken = f"[{project.project_id}-500]"
    await project.define("broken", system_prompt=broken)
    fleet.stub.add_script(
        Script(
            name=broken,
            match_system=broken,
            replies=[Reply(error_status=500, error_message="backend on fire")] * 5,
        )
    )
    events_ = stored_events_of(await collect(api.StartRun(start(project, "broken"))))
    run = events_[-1].run_finished.run
    assert run.status == common_pb2.RUN_STATUS_FAILED
    assert "500" in run.error_message
    assert "backend on fire" in run.error_message
    assert fleet.stub.used(broken) == 5
    count = await fleet.pool.fetchval(
        "SELECT count(*) FROM kb.agent_runs WHERE project_id = $1", project.project_id
    )
    assert count == 4  # ghostly, echo (once), limited, broken
