"""Whole numbers stay integers end to end (issue 37, item 7). A protobuf Struct carries every
number as a double; read with ``MessageToDict`` a model's ``{"limit": 5}`` became 5.0, so
``list_entities`` failed every time (``rows[:5.0]``), the graph stored ``5.0``,
``config.thread.max_turns: 3`` was refused as "must be an integer" and a structured answer's
73 came back as 73.0. Here every built-in tool is called with integers as Gemini sends
them (JSON numbers), through a real run on the in-process stack over real gRPC, with the
built-in tools run by the executor and by the toolpool; a definition and a manifest set an
integer setting; a structured answer is read back by GetRun, the stored events and
``agentfleet show --json``."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from agentfleet.gemini_stub import Call, GeminiStub, Reply, Script, StubRequest
from agentfleet.structs import struct_dict, to_struct, whole_numbers
from agentfleet.testing.services import Stack, start_stack
from agentfleet.v1 import (
    common_pb2,
    executor_pb2,
    executor_pb2_grpc,
    history_pb2,
    history_pb2_grpc,
    registry_pb2,
    registry_pb2_grpc,
)
from tests.e2e.cli_harness import Cli, cli  # noqa: F401 (the fixture)

P = "whole-numbers"
STEP_S = 30.0
EXAMPLE = Path(__file__).parents[2] / "examples/products/research/manifest.json"
TOOLS = [
    "create_entity",
    "get_entity",
    "update_entity",
    "list_entities",
    "create_relationship",
    "get_related",
    "graph_traverse",
    "search_fts",
    "search_hybrid",
    "create_subtasks",
]


def test_whole_numbers_of_a_struct_are_ints() -> None:
    document = {"a": 5, "b": [1, 2.5, {"c": -3}], "big": 2**60, "tiny": 1e-3, "e": 1e300}
    read = struct_dict(to_struct(document))
    assert read == {"a": 5, "b": [1, 2.5, {"c": -3}], "big": float(2**60), "tiny": 1e-3, "e": 1e300}
    assert [type(read["a"]), type(read["b"][0]), type(read["b"][2]["c"])] == [int] * 3
    # Beyond 2**53 a double is no exact integer: it stays a float.
    assert [type(read["big"]), type(read["e"])] == [float] * 2
    assert whole_numbers(True) is True  # a bool is not a number to JSON


async def _stack(
    database_url: str, pool: asyncpg.Pool, stub: GeminiStub, builtin_tools: str
) -> Stack:
    return await start_stack(
        database_url=database_url,
        pool=pool,
        environ={
            "AGENTFLEET_GEMINI_BASE_URL": stub.base_url or "",
            "AGENTFLEET_EXECUTOR_BUILTIN_TOOLS": builtin_tools,
        },
    )


@pytest.fixture(params=["inprocess", "toolpool"])
async def tools_stack(
    request: pytest.FixtureRequest,
    database_url: str,
    db_pool: asyncpg.Pool,
    gemini_stub: GeminiStub,
) -> AsyncIterator[Stack]:
    """The in-process stack, built-in tools run by the executor or by the toolpool."""
    stack = await _stack(database_url, db_pool, gemini_stub, request.param)
    try:
        yield stack
    finally:
        await stack.close()


def _registry(stack: Stack, token: str) -> registry_pb2_grpc.AgentRegistryServiceStub:
    return registry_pb2_grpc.AgentRegistryServiceStub(stack.channel("executor", token=token))


async def _define(stack: Stack, token: str, name: str, **fields: Any) -> None:
    definition = common_pb2.AgentDefinition(
        name=name,
        system_prompt=f"You are {name}.",
        model=common_pb2.ModelConfig(name="gemini-2.5-flash"),
        visibility=common_pb2.VISIBILITY_EXTERNAL,
    )
    for field, value in fields.items():
        if isinstance(value, dict):
            getattr(definition, field).CopyFrom(to_struct(value))
        elif isinstance(value, list):
            getattr(definition, field).extend(value)
        else:
            setattr(definition, field, value)
    await _registry(stack, token).UpsertAgentDefinition(
        registry_pb2.UpsertAgentDefinitionRequest(project_id=P, agent_definition=definition)
    )


async def _run(stack: Stack, token: str, agent: str) -> list[common_pb2.RunEvent]:
    executor = executor_pb2_grpc.ExecutorServiceStub(stack.channel("executor", token=token))
    out: list[common_pb2.RunEvent] = []
    async with asyncio.timeout(STEP_S):
        async for event in executor.StartRun(
            executor_pb2.StartRunRequest(project_id=P, agent_name=agent, input="Count.")
        ):
            out.append(event)
    return out


def _counter(request: StubRequest) -> Reply:
    """Creates an entity with numbers, then calls every other built-in tool with the integer
    arguments it takes, as Gemini sends them; then answers."""
    if request.turn == 0:
        properties = {"title": "nightly run", "succeeded": 5, "ratio": 2.5, "nested": {"n": [1]}}
        return Reply(calls=[Call("create_entity", {"type": "Run", "properties": properties})])
    if request.turn == 1:
        created = request.function_responses()[-1]["response"]["output"]["entity"]
        entity = created["id"]
        return Reply(
            calls=[
                Call("get_entity", {"id": entity}, id="get"),
                Call(
                    "update_entity",
                    {"id": entity, "expected_version": 1, "properties": {"failed": 0}},
                    id="update",
                ),
                Call("list_entities", {"type": "Run", "limit": 5}, id="list"),
                Call(
                    "create_relationship",
                    {"type": "mentions", "src_id": entity, "dst_id": entity},
                    id="link",
                ),
                Call("get_related", {"id": entity, "limit": 5}, id="related"),
                Call(
                    "graph_traverse",
                    {"start_id": entity, "max_depth": 2, "max_nodes": 10},
                    id="traverse",
                ),
                Call("search_fts", {"query": "nightly", "limit": 5}, id="fts"),
                Call("search_hybrid", {"query": "nightly", "limit": 5}, id="hybrid"),
            ]
        )
    if request.turn == 2:
        # Last, alone: the dispatcher runs the task at once, by another agent.
        return Reply(calls=[Call("create_subtasks", {"tasks": [TASK]}, id="subtasks")])
    return Reply(text="counted")


TASK = {"key": "a", "title": "count again", "priority": 2, "max_retries": 1}


async def test_every_built_in_tool_takes_and_returns_whole_numbers(
    tools_stack: Stack, gemini_stub: GeminiStub, db_pool: asyncpg.Pool
) -> None:
    token = await tools_stack.create_token(P, "admin")
    await _define(tools_stack, token, "counter", tools=TOOLS, config={"subtask_agents": ["idle"]})
    await _define(tools_stack, token, "idle")
    gemini_stub.add_script(Script(name="counter", match_system="You are counter.", policy=_counter))
    gemini_stub.add_script(
        Script(name="idle", match_system="You are idle.", replies=[Reply(text="idle")] * 5)
    )

    events = await _run(tools_stack, token, "counter")

    finished = events[-1].run_finished.run
    assert finished.status == common_pb2.RUN_STATUS_COMPLETED, finished.error_message
    responses = {
        e.tool_response.tool_call_id: e.tool_response for e in events if e.HasField("tool_response")
    }
    errors = {i: r.error for i, r in responses.items() if r.error}
    assert not errors
    listed = struct_dict(responses["list"].result)["output"]["entities"]
    assert [e["properties"]["succeeded"] for e in listed] == [5]
    # What the model read back: integers, not 5.0 (the stub parses the request's JSON).
    last = gemini_stub.requests_for("counter")[-1].function_responses()
    seen = {r["id"]: r["response"]["output"] for r in last if "id" in r}
    (entity,) = seen["list"]["entities"]
    assert type(entity["properties"]["succeeded"]) is int
    assert type(entity["version"]) is int
    stored = await db_pool.fetchrow(
        "SELECT (properties->'succeeded')::text AS succeeded, "
        "(properties->'failed')::text AS failed, "
        "(properties->'nested')::text AS nested, (properties->'ratio')::text AS ratio "
        "FROM kb.graph_objects WHERE project_id = $1 AND type = 'Run'",
        P,
    )
    # jsonb keeps a number's text: 5.0 would read back as "5.0".
    assert dict(stored) == {"succeeded": "5", "failed": "0", "nested": '{"n": [1]}', "ratio": "2.5"}
    task = await db_pool.fetchrow(
        "SELECT (properties->'priority')::text AS priority, "
        "(properties->'max_retries')::text AS max_retries "
        "FROM kb.graph_objects WHERE project_id = $1 AND type = 'SpecTask'",
        P,
    )
    assert dict(task) == {"priority": "2", "max_retries": "1"}
    inputs = await db_pool.fetch(
        "SELECT input::text FROM kb.agent_run_tool_calls WHERE run_id = $1::uuid "
        "AND tool_call_id = 'list'",
        finished.id,
    )
    assert [json.loads(r["input"]) for r in inputs] == [{"type": "Run", "limit": 5}]
    assert '"limit": 5}' in inputs[0]["input"]


async def test_integer_settings_from_a_definition_and_a_manifest(
    stub_stack: Stack, db_pool: asyncpg.Pool
) -> None:
    token = await stub_stack.create_token(P, "admin")
    registry = _registry(stub_stack, token)
    await _define(stub_stack, token, "threaded", config={"thread": {"max_turns": 3}})
    got = await registry.GetAgentDefinition(
        registry_pb2.GetAgentDefinitionRequest(project_id=P, name="threaded")
    )
    assert struct_dict(got.agent_definition.config) == {"thread": {"max_turns": 3}}

    manifest = json.loads(EXAMPLE.read_text())
    manifest["agents"][0]["config"] = {"thread": {"max_turns": 3}}
    manifest["agents"][0]["max_steps"] = 7
    await registry.InstallProduct(
        registry_pb2.InstallProductRequest(project_id=P, manifest=to_struct(manifest))
    )
    name = manifest["agents"][0]["name"]
    stored = await db_pool.fetch(
        "SELECT name, (config->'thread'->'max_turns')::text AS turns FROM kb.agent_definitions "
        "WHERE project_id = $1 AND name = ANY($2::text[]) ORDER BY name",
        P,
        [name, "threaded"],
    )
    assert sorted((r["name"], r["turns"]) for r in stored) == sorted(
        [(name, "3"), ("threaded", "3")]
    )
    products = await registry.ListProducts(registry_pb2.ListProductsRequest(project_id=P))
    (product,) = products.products
    assert type(struct_dict(product.manifest)["agents"][0]["config"]["thread"]["max_turns"]) is int


SCORE_SCHEMA = {
    "type": "object",
    "properties": {"score": {"type": "integer"}, "weights": {"type": "array"}},
    "required": ["score"],
}


async def test_a_structured_answer_keeps_its_integers(
    stub_stack: Stack,
    gemini_stub: GeminiStub,
    db_pool: asyncpg.Pool,
    cli: Cli,  # noqa: F811
) -> None:
    token = await stub_stack.create_token(P, "admin")
    await _define(stub_stack, token, "rater", output_schema=SCORE_SCHEMA)
    answer = {"score": 73, "weights": [1, 0.5]}
    gemini_stub.add_script(
        Script(
            name="rater", match_system="You are rater.", replies=[Reply(text=json.dumps(answer))]
        )
    )

    events = await _run(stub_stack, token, "rater")

    finished = events[-1].run_finished.run
    assert finished.status == common_pb2.RUN_STATUS_COMPLETED, finished.error_message
    history = history_pb2_grpc.HistoryServiceStub(stub_stack.channel("history", token=token))
    got = await history.GetRun(history_pb2.GetRunRequest(project_id=P, run_id=finished.id))
    assert struct_dict(got.run.output) == answer
    assert type(struct_dict(got.run.output)["score"]) is int
    # The RUN_FINISHED event's stored run (the row it ended with, what a replay sends) holds
    # 73, not 73.0.
    payload = await db_pool.fetchval(
        "SELECT (payload->'run_row'->'output'->'score')::text FROM kb.agent_run_events "
        "WHERE run_id = $1::uuid AND type = 'run_finished'",
        finished.id,
    )
    assert payload == "73"
    # The CLI reads another project: show it this run through a token of P.
    code, out, err = await cli(
        "show", finished.id, "--json", AGENTFLEET_PROJECT=P, AGENTFLEET_TOKEN=token
    )
    assert code == 0, err
    assert '"score": 73,' in out
    (shown,) = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert shown["run"]["output"] == answer


EXTRA = {
    "max_output_tokens": 256,
    "seed": 7,
    "top_k": 40,
    "thinking_config": {"thinking_budget": 1024},
}
APPROVALS = {"rules": [{"tools": ["create_entity"], "deadline_s": 3600}]}


async def test_generation_and_approval_settings_keep_their_integers(
    stub_stack: Stack, gemini_stub: GeminiStub, db_pool: asyncpg.Pool
) -> None:
    token = await stub_stack.create_token(P, "admin")
    definition = common_pb2.AgentDefinition(
        name="tuned",
        system_prompt="You are tuned.",
        model=common_pb2.ModelConfig(name="gemini-2.5-flash", extra=to_struct(EXTRA)),
        config=to_struct({"approvals": APPROVALS}),
        visibility=common_pb2.VISIBILITY_EXTERNAL,
    )
    await _registry(stub_stack, token).UpsertAgentDefinition(
        registry_pb2.UpsertAgentDefinitionRequest(project_id=P, agent_definition=definition)
    )
    stored = await db_pool.fetchrow(
        "SELECT model::text AS model, config::text AS config FROM kb.agent_definitions "
        "WHERE project_id = $1 AND name = 'tuned'",
        P,
    )
    assert json.loads(stored["model"])["extra"] == EXTRA
    # jsonb keeps a number's text: 256.0 would read back as "256.0".
    assert re.search(r'"max_output_tokens": 256[,}]', stored["model"]), stored["model"]
    assert re.search(r'"thinking_budget": 1024[,}]', stored["model"]), stored["model"]
    assert re.search(r'"deadline_s": 3600[,}]', stored["config"]), stored["config"]
    gemini_stub.add_script(
        Script(name="tuned", match_system="You are tuned.", replies=[Reply(text="tuned")])
    )

    events = await _run(stub_stack, token, "tuned")

    assert events[-1].run_finished.run.status == common_pb2.RUN_STATUS_COMPLETED
    (request,) = gemini_stub.requests_for("tuned")
    config = request.generation_config
    thinking = config["thinkingConfig"]
    # google-genai types top_k as a float itself; the integer settings go out as integers.
    budget = thinking.get("thinkingBudget", thinking.get("thinking_budget"))
    sent = (config["maxOutputTokens"], config["seed"], budget)
    assert sent == (256, 7, 1024)
    assert [type(v) for v in sent] == [int] * 3
