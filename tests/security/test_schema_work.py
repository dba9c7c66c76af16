"""A tenant's schema, a model's answer or a value checked against them cannot stall a
shared executor (issue 30, docs/SECURITY.md "Schema work").

Each attack runs against the real stack (in-process, so one event loop serves every
project) while another project calls its cheapest RPC (ListAgentDefinitions) over and
over: that call may take at most max(1.5 s, 10 times its baseline), and the attack is
refused, or bounded with a clear error naming the field.

- an output_schema whose ``$defs`` each name the next twice (1,143 bytes, 2^17 nodes):
  5-8 s per UpsertAgentDefinition (validate_only) and InstallProduct; now refused when
  written, for its expansion;
- 150,000 empty tags: 150,000 violations, 5-8 s and a 9.9 MB error trailer; now one;
- ``uniqueItems`` over a model's 4,000 objects: 23 s of pairwise compares on the loop; now
  hashed, in a worker process;
- a schema exponential in the value's depth (accepted: its recursion goes through a part
  of the value) and a deep answer or edited arguments: stopped at the pool's time limit,
  and the model (or the person) told so.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import pytest
from google.protobuf import json_format, struct_pb2

from agentfleet.bounded.schema_pool import DEFAULT_TIMEOUT_S
from agentfleet.gemini_stub import Reply, Script
from agentfleet.mcp.stdio import format_allowlist
from agentfleet.testing.checks.loop_stall import latency_bound, probe_latency_during
from agentfleet.testing.services import Stack, toolpool_only
from agentfleet.testing.stdio_allowlist import TEST_STDIO_COMMANDS
from agentfleet.testing.waiting import wait_for_query
from agentfleet.v1 import (
    common_pb2,
    executor_pb2,
    registry_pb2,
    registry_pb2_grpc,
    toolpool_pb2,
    toolpool_pb2_grpc,
)
from tests.integration.approval_harness import OTHER, PROJECT, Deployment, deployment
from tests.integration.test_toolpool_service import call_request, make_run

__all__ = ["deployment"]


def doubling_defs(levels: int = 17) -> dict[str, Any]:
    """The issue's schema: each ``$defs`` entry names the next twice through allOf."""
    defs: dict[str, Any] = {
        f"d{i}": {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}"}]}
        for i in range(levels)
    }
    defs[f"d{levels}"] = {"type": "string"}
    return {"type": "object", "$defs": defs, "properties": {"x": {"$ref": "#/$defs/d0"}}}


# Recursion through properties.x is accepted (the value's depth ends it), but each level
# checks the next twice: 2^depth checks of a value 30 levels deep.
DOUBLING_PER_LEVEL = {
    "type": "object",
    "$defs": {
        "node": {
            "type": "object",
            "properties": {"x": {"allOf": [{"$ref": "#/$defs/node"}, {"$ref": "#/$defs/node"}]}},
        }
    },
    "$ref": "#/$defs/node",
}


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"x": value}
    return value


def _struct(value: dict[str, Any]) -> struct_pb2.Struct:
    return json_format.ParseDict(value, struct_pb2.Struct())


def _registry(
    deployment: Deployment, caller: str = "admin"
) -> registry_pb2_grpc.AgentRegistryServiceStub:
    channel = deployment.stack.channel("executor", token=deployment.tokens[caller])
    return registry_pb2_grpc.AgentRegistryServiceStub(channel)


async def _while_another_project_calls(
    deployment: Deployment, attack: Callable[[], Awaitable[Any]]
) -> Any:
    """The result or refusal of the ``attack`` started, asserting tenant-b's cheapest RPC
    stayed fast meanwhile."""
    other = _registry(deployment, "other-member")

    async def probe() -> None:
        await other.ListAgentDefinitions(
            registry_pb2.ListAgentDefinitionsRequest(project_id=OTHER), timeout=60
        )

    async def outcome() -> Any:
        try:
            return await attack()
        except grpc.aio.AioRpcError as error:
            return error

    result, baseline, slowest = await probe_latency_during(outcome, probe)
    assert slowest <= latency_bound(baseline), (
        f"another project's ListAgentDefinitions took {slowest:.2f} s during the attack "
        f"(baseline {baseline * 1000:.1f} ms)"
    )
    return result


def _definition(**fields: Any) -> common_pb2.AgentDefinition:
    definition = common_pb2.AgentDefinition(
        name="schema-agent",
        system_prompt=fields.pop("system_prompt", "You are schema-agent."),
        model=common_pb2.ModelConfig(name="gemini-test"),
        tags=fields.pop("tags", []),
    )
    if "output_schema" in fields:
        definition.output_schema.CopyFrom(_struct(fields.pop("output_schema")))
    return definition


def _refusal(outcome: Any, field: str) -> str:
    assert isinstance(outcome, grpc.aio.AioRpcError), f"not refused: {outcome!r}"
    assert outcome.code() == grpc.StatusCode.INVALID_ARGUMENT, outcome.details()
    details = outcome.details() or ""
    assert field in details
    return details


async def test_a_schema_that_expands_exponentially_is_refused_when_written(
    deployment: Deployment,
) -> None:
    schema = doubling_defs()
    assert len(json.dumps(schema, separators=(",", ":"))) < 1200
    upsert = functools.partial(
        _registry(deployment).UpsertAgentDefinition,
        registry_pb2.UpsertAgentDefinitionRequest(
            project_id=PROJECT,
            agent_definition=_definition(output_schema=schema),
            validate_only=True,
        ),
    )
    details = _refusal(
        await _while_another_project_calls(deployment, upsert), "agent_definition.output_schema"
    )
    assert "schema nodes" in details


async def test_a_product_with_an_exponential_schema_is_refused(deployment: Deployment) -> None:
    agent = {
        "name": "schema-agent",
        "description": "Has an exponential output schema.",
        "system_prompt": "You are schema-agent.",
        "model": {"name": "gemini-test"},
        "output_schema": doubling_defs(),
    }
    manifest = {"name": "schema-product", "version": "1.0.0", "agents": [agent]}
    install = functools.partial(
        _registry(deployment).InstallProduct,
        registry_pb2.InstallProductRequest(
            project_id=PROJECT, manifest=_struct(manifest), validate_only=True
        ),
    )
    details = _refusal(
        await _while_another_project_calls(deployment, install), "manifest.agents[0].output_schema"
    )
    assert "schema nodes" in details
    assert await deployment.pool.fetchval("SELECT count(*) FROM kb.agent_definitions") == 0


async def test_a_flood_of_tags_is_one_violation(deployment: Deployment) -> None:
    upsert = functools.partial(
        _registry(deployment).UpsertAgentDefinition,
        registry_pb2.UpsertAgentDefinitionRequest(
            project_id=PROJECT,
            agent_definition=_definition(tags=[""] * 150_000),
            validate_only=True,
        ),
    )
    details = _refusal(
        await _while_another_project_calls(deployment, upsert), "agent_definition.tags"
    )
    assert "has 150000 entries; at most 200" in details
    assert len(details) < 1000


async def test_a_product_flooding_tags_is_one_violation(deployment: Deployment) -> None:
    agent = {"name": "a", "model": {"name": "gemini-test"}, "tags": [""] * 100_000}
    install = functools.partial(
        _registry(deployment).InstallProduct,
        registry_pb2.InstallProductRequest(
            project_id=PROJECT,
            manifest=_struct({"name": "tags", "version": "1.0.0", "agents": [agent]}),
            validate_only=True,
        ),
    )
    details = _refusal(
        await _while_another_project_calls(deployment, install), "manifest.agents[0].tags"
    )
    assert len(details) < 1000


async def test_a_manifest_of_large_honest_schemas_is_checked_off_the_loop(
    deployment: Deployment,
) -> None:
    # 15 output schemas of ~60 KiB: 7.6 s of metaschema checks, which held the loop.
    schema = {
        "type": "object",
        "properties": {
            f"p{i}": {"type": "string", "description": "x" * 40, "enum": ["a", "b"]}
            for i in range(560)
        },
    }
    agents = [
        {"name": f"agent-{i}", "model": {"name": "gemini-test"}, "output_schema": schema}
        for i in range(15)
    ]
    manifest = {"name": "big-schemas", "version": "1.0.0", "agents": agents}
    install = functools.partial(
        _registry(deployment).InstallProduct,
        registry_pb2.InstallProductRequest(
            project_id=PROJECT, manifest=_struct(manifest), validate_only=True
        ),
        timeout=120,
    )
    answer = await _while_another_project_calls(deployment, install)
    assert not isinstance(answer, grpc.aio.AioRpcError), answer.details()


UNIQUE_OBJECTS = {
    "type": "object",
    "properties": {
        "items": {
            "type": "array",
            "uniqueItems": True,
            "items": {"type": "object", "properties": {"id": {"type": "integer"}}},
        }
    },
    "required": ["items"],
}


async def _structured_run(
    deployment: Deployment, schema: dict[str, Any], answers: list[str]
) -> str:
    prompt = f"You are schema-agent {len(answers)} {answers[0][:20]}."
    deployment.stub.add_script(
        Script(name=prompt, match_system=prompt, replies=[Reply(text=a) for a in answers])
    )
    await _registry(deployment).UpsertAgentDefinition(
        registry_pb2.UpsertAgentDefinitionRequest(
            project_id=PROJECT,
            agent_definition=_definition(output_schema=schema, system_prompt=prompt),
        )
    )
    return await deployment.trigger("schema-agent", input="list them")


async def _finished(deployment: Deployment, run_id: str) -> tuple[str, str | None]:
    finished = functools.partial(
        wait_for_query,
        deployment.pool,
        "SELECT status IN ('completed', 'failed') FROM kb.agent_runs WHERE id = $1",
        run_id,
        timeout_s=90,
    )
    await _while_another_project_calls(deployment, finished)
    row = await deployment.pool.fetchrow(
        "SELECT status, error_message FROM kb.agent_runs WHERE id = $1", run_id
    )
    return row["status"], row["error_message"]


@pytest.mark.parametrize(("repeat", "status"), [(False, "completed"), (True, "failed")])
async def test_unique_items_over_a_long_answer_is_bounded(
    deployment: Deployment, repeat: bool, status: str
) -> None:
    items = [{"id": i, "name": f"item {i}"} for i in range(4000)]
    if repeat:
        items.append({"name": "item 7", "id": 7.0})  # equal to item 7 for JSON Schema
    answer = json.dumps({"items": items})
    run_id = await _structured_run(deployment, UNIQUE_OBJECTS, [answer] * 3)
    found, error = await _finished(deployment, run_id)
    assert found == status
    if repeat:
        assert "non-unique" in (error or "")


async def test_a_check_past_the_time_limit_fails_the_run_with_a_clear_error(
    deployment: Deployment,
) -> None:
    answer = json.dumps(nested(30))
    run_id = await _structured_run(deployment, DOUBLING_PER_LEVEL, [answer] * 3)
    found, error = await _finished(deployment, run_id)
    assert found == "failed"
    assert f"took longer than {DEFAULT_TIMEOUT_S:g} s" in (error or "")


async def test_edited_arguments_past_the_time_limit_are_refused(deployment: Deployment) -> None:
    await deployment.define_clerk()
    run_id = await deployment.trigger("clerk", input="note this")
    call = await deployment.held_call(run_id)
    # What a tool's MCP server may declare as its parameters.
    await deployment.pool.execute(
        "UPDATE kb.agent_run_tool_calls SET tool_parameters = $2::jsonb WHERE id = $1",
        call["id"],
        DOUBLING_PER_LEVEL,
    )
    decide = functools.partial(
        deployment.executor().DecideToolCall,
        deployment.decision(
            run_id,
            call["tool_call_id"],
            decision=executor_pb2.TOOL_CALL_DECISION_APPROVE,
            arguments=nested(30),
        ),
    )
    details = _refusal(await _while_another_project_calls(deployment, decide), "arguments")
    assert "took longer than" in details


SCHEMA_SERVER = (sys.executable, str(Path(__file__).with_name("schema_mcp_server.py")))
TOOLPOOL_ENVIRON = {
    "AGENTFLEET_MCP_STDIO_ALLOWLIST": format_allowlist([*TEST_STDIO_COMMANDS, SCHEMA_SERVER])
}
HOSTILE, VICTIM = "hostile-schemas", "victim-schemas"


async def _toolpool_while_another_project_calls(
    stack: Stack, attack: Callable[[], Awaitable[Any]]
) -> Any:
    victim = await stack.toolpool_as(VICTIM, "member")

    async def probe() -> None:
        await victim.ListMcpServers(
            toolpool_pb2.ListMcpServersRequest(project_id=VICTIM), timeout=60
        )

    result, baseline, slowest = await probe_latency_during(attack, probe)
    assert slowest <= latency_bound(baseline), (
        f"another project's ListMcpServers took {slowest:.2f} s during the attack "
        f"(baseline {baseline * 1000:.1f} ms)"
    )
    return result


async def test_an_mcp_servers_costly_schemas_are_bounded_in_the_toolpool(
    database_url: str, db_pool: asyncpg.Pool
) -> None:
    async with toolpool_only(database_url, db_pool, TOOLPOOL_ENVIRON) as stack:
        admin = await stack.toolpool_as(HOSTILE)
        await admin.UpsertMcpServer(
            toolpool_pb2.UpsertMcpServerRequest(
                project_id=HOSTILE,
                mcp_server=toolpool_pb2.McpServer(
                    name="schemas",
                    transport=toolpool_pb2.MCP_TRANSPORT_STDIO,
                    command=SCHEMA_SERVER[0],
                    args=SCHEMA_SERVER[1:],
                ),
            )
        )
        probe = await _toolpool_while_another_project_calls(
            stack,
            functools.partial(
                admin.TestMcpServer,
                toolpool_pb2.TestMcpServerRequest(project_id=HOSTILE, name="schemas"),
                timeout=120,
            ),
        )
        assert probe.ok, probe.error
        assert sorted(t.name for t in probe.tools) == ["schemas__deep", "schemas__unique"]
        assert "tool 'doubling' is left out: its output schema expands to more than" in probe.error

        executor = toolpool_pb2_grpc.ToolPoolServiceStub(
            stack.channel("toolpool", token=stack.service_tokens["executor"])
        )
        run_id = await make_run(db_pool, HOSTILE, ["schemas__*"])

        async def call(tool: str, **args: object) -> toolpool_pb2.CallToolResponse:
            request = call_request(HOSTILE, run_id, f"schemas__{tool}", **args)
            return await _toolpool_while_another_project_calls(
                stack, functools.partial(executor.CallTool, request, timeout=120)
            )

        distinct = await call("unique", count=4000, repeat=False)
        assert not distinct.is_error, distinct.error_message
        repeated = await call("unique", count=4000, repeat=True)
        assert repeated.is_error
        assert "non-unique" in repeated.error_message
        deep = await call("deep", depth=30)
        assert deep.is_error
        assert f"took longer than {DEFAULT_TIMEOUT_S:g} s" in deep.error_message
        shallow = await call("deep", depth=3)
        assert not shallow.is_error, shallow.error_message
