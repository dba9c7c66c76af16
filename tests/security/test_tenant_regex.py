"""A regex from a tenant or an MCP server cannot freeze a shared event loop.

A tenant admin stores a pattern with catastrophic backtracking (``^(a+)+$``) where the
runtime matches it against text the model or the server chooses: an approval rule's
``when.matches``, a ``pattern`` in the definition's ``output_schema``, a ``pattern`` in an
MCP tool's parameter schema (edited arguments at DecideToolCall) or output schema (the MCP
client's check of a result). With Python's ``re``, 27 bytes (``"a" * 26 + "!"``) held the
loop 4-9 s, doubling per character, and every other project's runs with it. Each is now
matched by RE2 (:mod:`agentfleet.bounded.tenant_regex`) in linear time, and a pattern RE2 cannot
run (backreferences, lookarounds) is refused when written, naming the field.

The stack is in-process, so the test's own event loop is the executor's and the toolpool's:
the longest gap between ticks of a 50 ms ticker is how long every other run stood still.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import pytest
from google.protobuf import json_format, struct_pb2

from agentfleet.gemini_stub import Call, Reply, Script
from agentfleet.mcp.servers import McpServerConfig
from agentfleet.testing.checks.loop_stall import longest_stall_during
from agentfleet.testing.waiting import wait_for_query
from agentfleet.v1 import common_pb2, executor_pb2, registry_pb2, registry_pb2_grpc
from services.toolpool.mcp import McpClientPool
from tests.integration.approval_harness import PROJECT, Deployment, deployment

__all__ = ["deployment"]


EVIL = "^(a+)+$"
PAYLOAD = "a" * 26 + "!"  # 27 bytes: seconds of backtracking in re; every extra 'a' doubles it
MAX_STALL_S = 1.0
TICK_S = 0.05
REGEX_SERVER = (sys.executable, str(Path(__file__).with_name("regex_mcp_server.py")))


def _struct(value: dict[str, Any]) -> struct_pb2.Struct:
    return json_format.ParseDict(value, struct_pb2.Struct())


def _string_pattern(pattern: str) -> dict[str, Any]:
    """An object schema whose property ``t`` must match ``pattern``."""
    return {
        "type": "object",
        "properties": {"t": {"type": "string", "pattern": pattern}},
        "required": ["t"],
    }


def _approval_config(pattern: str) -> dict[str, Any]:
    rule = {"tools": ["create_entity"], "when": {"pointer": "/type", "matches": pattern}}
    return {"approvals": {"rules": [rule]}}


def _registry(deployment: Deployment) -> registry_pb2_grpc.AgentRegistryServiceStub:
    channel = deployment.stack.channel("executor", token=deployment.tokens["admin"])
    return registry_pb2_grpc.AgentRegistryServiceStub(channel)


@pytest.mark.parametrize(
    ("where", "status"),
    # The pattern still decides: the call is not held and runs; the answer never matches.
    [("approval_rule", "completed"), ("output_schema", "failed")],
)
async def test_a_tenant_regex_cannot_stall_the_executor(
    deployment: Deployment, where: str, status: str
) -> None:
    prompt = f"You are regex-{where}."
    definition = common_pb2.AgentDefinition(
        name="regex-agent", system_prompt=prompt, model=common_pb2.ModelConfig(name="gemini-test")
    )
    if where == "approval_rule":
        definition.tools.append("create_entity")
        definition.config.CopyFrom(_struct(_approval_config(EVIL)))
        replies = [Reply(calls=[Call("create_entity", {"type": PAYLOAD})]), Reply(text="ok")]
    else:
        definition.output_schema.CopyFrom(_struct(_string_pattern(EVIL)))
        replies = [Reply(text=json.dumps({"t": PAYLOAD}))] * 3
    deployment.stub.add_script(Script(name=where, match_system=prompt, replies=replies))
    await _registry(deployment).UpsertAgentDefinition(
        registry_pb2.UpsertAgentDefinitionRequest(project_id=PROJECT, agent_definition=definition)
    )

    run_id = await deployment.trigger("regex-agent", input="go")
    finished = wait_for_query(
        deployment.pool,
        "SELECT status IN ('completed', 'failed') FROM kb.agent_runs WHERE id = $1",
        run_id,
        timeout_s=60,
    )
    _, stall = await longest_stall_during(finished)
    assert stall < MAX_STALL_S, f"the executor's event loop stood still for {stall:.1f} s"
    assert (
        await deployment.pool.fetchval("SELECT status FROM kb.agent_runs WHERE id = $1", run_id)
        == status
    )


async def test_edited_arguments_against_an_mcp_pattern_cannot_stall_the_executor(
    deployment: Deployment,
) -> None:
    await deployment.define_clerk()
    run_id = await deployment.trigger("clerk", input="note this")
    call = await deployment.held_call(run_id)
    # The parameter schema stored with the held call is what the tool's server declared;
    # an MCP server may declare any pattern, so put one there.
    await deployment.pool.execute(
        "UPDATE kb.agent_run_tool_calls SET tool_parameters = $2::jsonb WHERE id = $1",
        call["id"],
        {"type": "object", "properties": {"type": {"type": "string", "pattern": EVIL}}},
    )
    stored = await deployment.pool.fetchval(
        "SELECT tool_parameters -> 'properties' -> 'type' ->> 'pattern' "
        "FROM kb.agent_run_tool_calls WHERE id = $1",
        call["id"],
    )
    assert stored == EVIL

    decide = deployment.executor().DecideToolCall(
        deployment.decision(
            run_id,
            call["tool_call_id"],
            decision=executor_pb2.TOOL_CALL_DECISION_APPROVE,
            arguments={"type": PAYLOAD},
        )
    )
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await longest_stall_during(decide)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "does not match" in (refused.value.details() or "")
    # pytest.raises swallowed the measurement: measure a second, identical decision.
    again = deployment.executor().DecideToolCall(
        deployment.decision(
            run_id,
            call["tool_call_id"],
            decision=executor_pb2.TOOL_CALL_DECISION_APPROVE,
            arguments={"type": PAYLOAD},
        )
    )
    _, stall = await longest_stall_during(_refused(again))
    assert stall < MAX_STALL_S, f"the executor's event loop stood still for {stall:.1f} s"


async def _refused(call: Awaitable[Any]) -> grpc.StatusCode:
    try:
        await call
    except grpc.aio.AioRpcError as error:
        return error.code()
    raise AssertionError("the call was not refused")


async def test_an_mcp_output_schema_pattern_cannot_stall_the_toolpool(
    db_pool: asyncpg.Pool,
) -> None:
    mcp = McpClientPool(stdio_allowlist=(REGEX_SERVER,))
    config = McpServerConfig(
        project_id=PROJECT,
        name="regex",
        transport="stdio",
        command=REGEX_SERVER[0],
        args=REGEX_SERVER[1:],
    )
    try:
        await mcp.list_tools(config, {})  # connected and listed before the clock starts
        result, stall = await longest_stall_during(
            mcp.call_tool(config, {}, "echo", {"text": PAYLOAD})
        )
        assert stall < MAX_STALL_S, f"the toolpool's event loop stood still for {stall:.1f} s"
        # The server's schema still holds: the result does not match it.
        assert result.is_error
        assert "does not match" in (result.error or "")
        matching, _ = await longest_stall_during(
            mcp.call_tool(config, {}, "echo", {"text": "a" * 27})
        )
        assert not matching.is_error
    finally:
        await mcp.aclose()


UNSUPPORTED = {
    "lookahead": "^(?=admin)",
    "backreference": r"(a)\1",
}


@pytest.mark.parametrize("pattern", sorted(UNSUPPORTED.values()))
@pytest.mark.parametrize(
    ("where", "field"),
    [
        ("approval_rule", "config.approvals.rules[0].when.matches"),
        ("output_schema", "agent_definition.output_schema"),
        ("pattern_properties", "agent_definition.output_schema"),
    ],
)
async def test_a_regex_re2_cannot_run_is_refused_when_written(
    deployment: Deployment, where: str, field: str, pattern: str
) -> None:
    definition = common_pb2.AgentDefinition(
        name="regex-agent", model=common_pb2.ModelConfig(name="gemini-test")
    )
    if where == "approval_rule":
        definition.tools.append("create_entity")
        definition.config.CopyFrom(_struct(_approval_config(pattern)))
    elif where == "output_schema":
        definition.output_schema.CopyFrom(_struct(_string_pattern(pattern)))
    else:
        schema = {"type": "object", "patternProperties": {pattern: {"type": "string"}}}
        definition.output_schema.CopyFrom(_struct(schema))

    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await _registry(deployment).UpsertAgentDefinition(
            registry_pb2.UpsertAgentDefinitionRequest(
                project_id=PROJECT, agent_definition=definition
            )
        )
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    details = refused.value.details() or ""
    assert field in details
    assert "RE2" in details
    assert await deployment.pool.fetchval("SELECT count(*) FROM kb.agent_definitions") == 0


@pytest.mark.parametrize(
    ("agent_fields", "field"),
    [
        ({"config": _approval_config(r"(a)\1")}, "when.matches"),
        ({"output_schema": _string_pattern("^(?=a)")}, "manifest.agents[0].output_schema"),
    ],
)
async def test_a_product_with_a_regex_re2_cannot_run_is_refused(
    deployment: Deployment, agent_fields: dict[str, Any], field: str
) -> None:
    agent = {
        "name": "regex-agent",
        "description": "Has a tenant's regex.",
        "system_prompt": "You are regex-agent.",
        "model": {"name": "gemini-test"},
        "tools": ["create_entity"],
        **agent_fields,
    }
    manifest = {"name": "regex-product", "version": "1.0.0", "agents": [agent]}

    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await _registry(deployment).InstallProduct(
            registry_pb2.InstallProductRequest(project_id=PROJECT, manifest=_struct(manifest))
        )
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    details = refused.value.details() or ""
    assert field in details
    assert "RE2" in details
    assert await deployment.pool.fetchval("SELECT count(*) FROM kb.agent_definitions") == 0
