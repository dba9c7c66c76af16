"""Structured output (issue #19) through real gRPC (the in-process stack, auth on), real
PostgreSQL and the stub Gemini server: a definition's output_schema asks for JSON, the
answer is validated and stored as AgentRun.output (GetRun, RUN_FINISHED); an invalid
answer gets one repair, then the run fails with the schema error; a child's output
reaches its parent in the spawn_agents result; schemas are checked when written."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import asyncpg
import grpc
import pytest
from google.protobuf import json_format, struct_pb2

from agentfleet.gemini_stub import Call, GeminiStub, Reply, Script, StubRequest
from agentfleet.testing.services import Stack
from agentfleet.v1 import (
    common_pb2,
    dispatcher_pb2,
    dispatcher_pb2_grpc,
    executor_pb2,
    executor_pb2_grpc,
    history_pb2,
    history_pb2_grpc,
    registry_pb2,
    registry_pb2_grpc,
)

P = "structured"
STEP = 20.0
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "title": {"type": "string"},
        "score": {"type": "integer", "minimum": 0, "maximum": 10},
    },
    "required": ["title", "score"],
    "additionalProperties": False,
}


@pytest.fixture
async def admin(stub_stack: Stack) -> str:
    return await stub_stack.create_token(P, "admin")


def _registry(stack: Stack, token: str) -> registry_pb2_grpc.AgentRegistryServiceStub:
    return registry_pb2_grpc.AgentRegistryServiceStub(stack.channel("executor", token=token))


def _struct(value: dict[str, Any]) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(value)
    return struct


async def _define(
    stack: Stack,
    token: str,
    name: str,
    *,
    schema: dict[str, Any] | None,
    tools: list[str] | None = None,
    fallback_models: list[str] | None = None,
) -> None:
    definition = common_pb2.AgentDefinition(
        name=name,
        description=f"the {name}",
        system_prompt=f"You are {name}.",
        model=common_pb2.ModelConfig(
            name="gemini-2.5-flash", fallback_models=fallback_models or []
        ),
        tools=tools or [],
    )
    if schema is not None:
        definition.output_schema.CopyFrom(_struct(schema))
    await _registry(stack, token).UpsertAgentDefinition(
        registry_pb2.UpsertAgentDefinitionRequest(project_id=P, agent_definition=definition)
    )


async def _run(stack: Stack, token: str, agent: str) -> list[common_pb2.RunEvent]:
    executor = executor_pb2_grpc.ExecutorServiceStub(stack.channel("executor", token=token))
    out: list[common_pb2.RunEvent] = []
    async with asyncio.timeout(STEP):
        async for event in executor.StartRun(
            executor_pb2.StartRunRequest(project_id=P, agent_name=agent, input="Rate Gemini.")
        ):
            out.append(event)
    return out


def _schema_asked(request: StubRequest) -> bool:
    config = request.body.get("generationConfig") or {}
    return (
        config.get("responseMimeType") == "application/json"
        and config.get("responseJsonSchema") == SCHEMA
    )


async def test_valid_output_is_stored_and_returned(
    stub_stack: Stack, admin: str, gemini_stub: GeminiStub
) -> None:
    await _define(stub_stack, admin, "rater", schema=SCHEMA)
    answer = {"title": "Gemini", "score": 8}
    gemini_stub.add_script(
        Script(
            name="rater", match_system="You are rater.", replies=[Reply(text=json.dumps(answer))]
        )
    )

    events = await _run(stub_stack, admin, "rater")

    finished = events[-1].run_finished.run
    assert finished.status == common_pb2.RUN_STATUS_COMPLETED
    assert json_format.MessageToDict(finished.output) == {"title": "Gemini", "score": 8.0}
    assert json.loads(finished.summary) == answer
    # No tools: the schema went with the (only) call.
    (request,) = gemini_stub.requests_for("rater")
    assert _schema_asked(request)
    assert "tools" not in request.body
    history = history_pb2_grpc.HistoryServiceStub(stub_stack.channel("history", token=admin))
    got = await history.GetRun(history_pb2.GetRunRequest(project_id=P, run_id=finished.id))
    assert got.run.output == finished.output


async def test_invalid_output_gets_one_repair_then_the_run_fails_with_the_schema_error(
    stub_stack: Stack, admin: str, gemini_stub: GeminiStub, db_pool: asyncpg.Pool
) -> None:
    await _define(stub_stack, admin, "rater", schema=SCHEMA)
    gemini_stub.add_script(
        Script(
            name="rater",
            match_system="You are rater.",
            replies=[
                Reply(text=json.dumps({"title": "Gemini", "score": 11})),
                Reply(text=json.dumps({"title": "Gemini"})),
                Reply(text=json.dumps({"title": "never asked", "score": 1})),
            ],
        )
    )

    events = await _run(stub_stack, admin, "rater")

    finished = events[-1].run_finished.run
    assert finished.status == common_pb2.RUN_STATUS_FAILED
    assert "output does not match output_schema" in finished.error_message
    assert "'score' is a required property" in finished.error_message
    assert not finished.HasField("output")
    _first, repair = gemini_stub.requests_for("rater")  # exactly one repair
    assert _schema_asked(repair)
    note = repair.body["contents"][-1]["parts"][0]["text"]
    assert "11 is greater than the maximum of 10" in note
    assert finished.step_count == 2
    stored = await db_pool.fetchval(
        "SELECT output FROM kb.agent_runs WHERE id = $1::uuid", finished.id
    )
    assert stored is None


async def test_a_repaired_answer_completes_the_run(
    stub_stack: Stack, admin: str, gemini_stub: GeminiStub
) -> None:
    await _define(stub_stack, admin, "rater", schema=SCHEMA)
    gemini_stub.add_script(
        Script(
            name="rater",
            match_system="You are rater.",
            replies=[
                Reply(text="Gemini scores 8 of 10."),
                Reply(text=json.dumps({"title": "Gemini", "score": 8})),
            ],
        )
    )

    events = await _run(stub_stack, admin, "rater")

    finished = events[-1].run_finished.run
    assert finished.status == common_pb2.RUN_STATUS_COMPLETED
    assert json_format.MessageToDict(finished.output) == {"title": "Gemini", "score": 8.0}
    _first, repair = gemini_stub.requests_for("rater")
    assert "output is not JSON" in repair.body["contents"][-1]["parts"][0]["text"]


async def test_child_output_reaches_the_parent_and_a_parent_with_tools_is_asked_again(
    stub_stack: Stack, admin: str, gemini_stub: GeminiStub
) -> None:
    await _define(stub_stack, admin, "rater", schema=SCHEMA)
    await _define(stub_stack, admin, "boss", schema=SCHEMA, tools=["spawn_agents"])
    spawn_results: list[dict[str, Any]] = []

    def boss(request: StubRequest) -> Reply:
        if request.turn == 0:
            task = {"agent_name": "rater", "description": "rate", "prompt": "Rate Gemini."}
            return Reply(calls=[Call("spawn_agents", {"tasks": [task]})])
        if request.turn == 1:
            spawn_results.append(request.function_responses()[-1]["response"])
            return Reply(text="The rater gave 7.")
        # The final-answer call: schema set, no tools.
        return Reply(text=json.dumps({"title": "boss", "score": 7}))

    gemini_stub.add_script(Script(name="boss", match_system="You are boss.", policy=boss))
    gemini_stub.add_script(
        Script(
            name="rater",
            match_system="You are rater.",
            replies=[Reply(text=json.dumps({"title": "child", "score": 7}))],
        )
    )

    events = await _run(stub_stack, admin, "boss")

    finished = events[-1].run_finished.run
    assert finished.status == common_pb2.RUN_STATUS_COMPLETED, finished.error_message
    (result,) = spawn_results[0]["output"]["results"]
    assert result["output"] == {"title": "child", "score": 7}
    assert json_format.MessageToDict(finished.output) == {"title": "boss", "score": 7.0}
    steps = gemini_stub.requests_for("boss")
    assert len(steps) == 3
    assert not _schema_asked(steps[0])
    assert "tools" in steps[0].body
    assert _schema_asked(steps[2])
    assert "tools" not in steps[2].body


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"type": "object", "properties": {"a": {"type": "nope"}}}, "is not a valid JSON Schema"),
        ({"type": "array"}, "must describe a JSON object"),
        ({"type": "object", "$ref": "#"}, "refers to itself"),
        (
            {"type": "object", "description": "x" * (65 * 1024)},
            "the limit is 65536 bytes",
        ),
    ],
)
async def test_upsert_refuses_a_bad_output_schema(
    stub_stack: Stack, admin: str, db_pool: asyncpg.Pool, schema: dict[str, Any], message: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await _define(stub_stack, admin, "rater", schema=schema)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "agent_definition.output_schema" in (refused.value.details() or "")
    assert message in (refused.value.details() or "")
    assert await db_pool.fetchval("SELECT count(*) FROM kb.agent_definitions") == 0


async def test_a_task_run_by_an_agent_with_a_schema_keeps_the_output(
    stub_stack: Stack, admin: str, gemini_stub: GeminiStub, db_pool: asyncpg.Pool
) -> None:
    await _define(stub_stack, admin, "rater", schema=SCHEMA)
    gemini_stub.add_script(
        Script(
            name="rater",
            match_system="You are rater.",
            replies=[Reply(text=json.dumps({"title": "task", "score": 3}))],
        )
    )
    dispatcher = dispatcher_pb2_grpc.DispatcherServiceStub(
        stub_stack.channel("dispatcher", token=admin)
    )
    created = await dispatcher.CreateTaskGraph(
        dispatcher_pb2.CreateTaskGraphRequest(
            project_id=P,
            tasks=[dispatcher_pb2.TaskSpec(key="rate", title="Rate", assigned_agent="rater")],
        )
    )
    graph_id = created.task_graph.id
    async with asyncio.timeout(STEP):
        async for _ in dispatcher.WatchTaskGraph(
            dispatcher_pb2.WatchTaskGraphRequest(project_id=P, task_graph_id=graph_id)
        ):
            pass
    graph = await dispatcher.GetTaskGraph(
        dispatcher_pb2.GetTaskGraphRequest(project_id=P, task_graph_id=graph_id)
    )
    (task,) = graph.task_graph.tasks
    assert task.status == dispatcher_pb2.TASK_STATUS_COMPLETED, task.error_message
    stored = await db_pool.fetchval(
        "SELECT properties -> 'output' FROM kb.graph_objects WHERE id = $1::uuid", task.id
    )
    assert stored == {"title": "task", "score": 3}


async def test_the_schema_goes_to_the_fallback_model_when_the_primary_keeps_failing(
    stub_stack: Stack, admin: str, gemini_stub: GeminiStub
) -> None:
    await _define(stub_stack, admin, "rater", schema=SCHEMA, fallback_models=["gemini-2.5-pro"])
    gemini_stub.add_script(
        Script(
            name="primary",
            match_system="You are rater.",
            match_model="gemini-2.5-flash",
            replies=[Reply(error_status=503, error_message="overloaded")] * 20,
        )
    )
    answer = {"title": "Gemini", "score": 9}
    gemini_stub.add_script(
        Script(
            name="fallback",
            match_system="You are rater.",
            match_model="gemini-2.5-pro",
            replies=[Reply(text=json.dumps(answer))],
        )
    )

    events = await _run(stub_stack, admin, "rater")

    finished = events[-1].run_finished.run
    assert finished.status == common_pb2.RUN_STATUS_COMPLETED
    assert json.loads(finished.summary) == answer
    (request,) = gemini_stub.requests_for("fallback")
    assert _schema_asked(request)
    assert all(_schema_asked(r) for r in gemini_stub.requests_for("primary"))
    switched = [e.safety for e in events if e.safety.kind == common_pb2.SAFETY_KIND_MODEL_FALLBACK]
    assert [s.details["model"] for s in switched] == ["gemini-2.5-pro"]
