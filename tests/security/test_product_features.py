"""Hostile input to the product features of issue #19 (structured output), through real
gRPC (the in-process stack, auth on) on real PostgreSQL, with the stub Gemini server.

A tenant controls a definition's ``output_schema``: a huge, deeply nested,
self-referencing or not-a-schema document is refused with INVALID_ARGUMENT naming the
field and the limit, and nothing is written. A model answer that is huge or nested deeper
than any decoder goes fails the run with a short error, never a crash.
(Approvals and threads: test_product_features_approvals.py.)
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import asyncpg
import grpc
import pytest

from agentfleet.gemini_stub import GeminiStub, Reply, Script
from agentfleet.testing.services import Stack
from agentfleet.v1 import (
    common_pb2,
    executor_pb2,
    executor_pb2_grpc,
    registry_pb2,
    registry_pb2_grpc,
)

P = "product-features"
STEP = 20.0


def _nested(levels: int) -> dict[str, Any]:
    """A schema nested ``levels`` arrays deep (lists: the fewest protobuf levels per JSON
    level, so the request itself stays within protobuf's nesting limit)."""
    value: Any = "x"
    for _ in range(levels):
        value = [value]
    return {"type": "object", "examples": [value]}


HOSTILE_SCHEMAS = {
    "huge": ({"type": "object", "description": "x" * (1024 * 1024)}, "limit is 65536 bytes"),
    "many_properties": (
        {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(5000)}},
        "limit is 65536 bytes",
    ),
    "deep": (_nested(40), "nested deeper than 32 levels"),
    "self_reference": ({"type": "object", "$ref": "#"}, "refers to itself"),
    "mutual_reference": (
        {
            "type": "object",
            "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
            "$ref": "#/$defs/a",
        },
        "refers to itself",
    ),
    "not_a_schema": ({"type": "object", "minProperties": -1}, "not a valid JSON Schema"),
    "not_an_object": ({"type": ["array", "string"]}, "must describe a JSON object"),
}


async def _registry(stack: Stack) -> registry_pb2_grpc.AgentRegistryServiceStub:
    token = await stack.create_token(P, "admin")
    return registry_pb2_grpc.AgentRegistryServiceStub(stack.channel("executor", token=token))


@pytest.mark.parametrize("case", sorted(HOSTILE_SCHEMAS))
async def test_hostile_output_schema_is_refused_and_nothing_is_written(
    stub_stack: Stack, db_pool: asyncpg.Pool, case: str
) -> None:
    schema, limit = HOSTILE_SCHEMAS[case]
    registry = await _registry(stub_stack)
    definition = common_pb2.AgentDefinition(
        name="typed", model=common_pb2.ModelConfig(name="gemini-2.5-flash")
    )
    definition.output_schema.update(schema)

    for validate_only in (True, False):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await registry.UpsertAgentDefinition(
                registry_pb2.UpsertAgentDefinitionRequest(
                    project_id=P, agent_definition=definition, validate_only=validate_only
                )
            )
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        details = refused.value.details() or ""
        assert "agent_definition.output_schema" in details
        assert limit in details
        assert len(details) < 2000  # names the limit; does not echo the input
    assert await db_pool.fetchval("SELECT count(*) FROM kb.agent_definitions") == 0


def _deep_json(levels: int) -> str:
    return '{"title": ' + "[" * levels + "]" * levels + ', "score": 1}'


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(_deep_json(50_000), id="nested_past_the_json_decoder"),
        pytest.param(_deep_json(40), id="nested_past_the_output_limit"),
        pytest.param(json.dumps({"title": "x" * 2_000_000, "score": 1}), id="huge_string"),
        pytest.param("[" * 10 + "1" + "]" * 10, id="not_an_object"),
    ],
)
async def test_hostile_model_answer_fails_the_run_with_a_short_error(
    stub_stack: Stack, db_pool: asyncpg.Pool, gemini_stub: GeminiStub, answer: str
) -> None:
    registry = await _registry(stub_stack)
    definition = common_pb2.AgentDefinition(
        name="typed",
        system_prompt="You are typed.",
        model=common_pb2.ModelConfig(name="gemini-2.5-flash"),
    )
    definition.output_schema.update(
        {"type": "object", "properties": {"title": {"type": "string", "maxLength": 100}}}
    )
    await registry.UpsertAgentDefinition(
        registry_pb2.UpsertAgentDefinitionRequest(project_id=P, agent_definition=definition)
    )
    gemini_stub.add_script(
        Script(
            name="typed",
            match_system="You are typed.",
            replies=[Reply(text=answer), Reply(text=answer)],
        )
    )
    token = await stub_stack.create_token(P, "member")
    executor = executor_pb2_grpc.ExecutorServiceStub(stub_stack.channel("executor", token=token))

    events = []
    async with asyncio.timeout(STEP):
        async for event in executor.StartRun(
            executor_pb2.StartRunRequest(project_id=P, agent_name="typed", input="go")
        ):
            events.append(event)

    finished = events[-1].run_finished.run
    assert finished.status == common_pb2.RUN_STATUS_FAILED
    # The schema error, or (nested past any JSON decoder) a malformed model reply.
    error = finished.error_message
    assert error.startswith("output ") or error.endswith(
        "model reply is nested too deeply to decode"
    )
    assert "internal error" not in error
    assert len(error) < 2000
    row = await db_pool.fetchrow(
        "SELECT status, output FROM kb.agent_runs WHERE id = $1::uuid", finished.id
    )
    assert (row["status"], row["output"]) == ("failed", None)
