"""Pure parts of the executor: call planning, the Gemini request, request validation."""

from __future__ import annotations

import pytest
from google.genai import types

from agentfleet.errors import FailedPrecondition, InvalidArgument
from agentfleet.v1 import executor_pb2, toolpool_pb2
from services.executor.model.model_request import (
    function_tools,
    generation_config,
    outcome_result,
    plan_calls,
)
from services.executor.queue import DEFAULT_CANCEL_REASON, parse_cancel_payload
from services.executor.registry.model_config import ModelConfig
from services.executor.run_requests import start_params
from services.executor.tools.tool_gateway import ResolvedTool, ToolOutcome, tool_outcome

TOOLS = {
    "echo": ResolvedTool(name="echo", description="d", parameters={}, source="mcp:srv"),
}


def test_plan_calls_assigns_unique_ids_and_refuses_unknown_or_malformed() -> None:
    used: set[str] = {"dup"}
    planned = plan_calls(
        [
            types.FunctionCall(name="echo", args={"text": "x"}, id="dup"),
            types.FunctionCall(name="echo", args={"text": "y"}, id="given"),
            types.FunctionCall(name="ghost", args={}),
            types.FunctionCall(args={"a": 1}),
        ],
        TOOLS,
        step=2,
        used_ids=used,
    )
    ids = [p.tool_call_id for p in planned]
    assert len(set(ids)) == 4
    assert ids[0] != "dup"
    assert ids[1] == "given"
    assert planned[0].refusal is None
    assert planned[0].source == "mcp:srv"
    assert "tool 'ghost' is not allowed for this agent" in (planned[2].refusal or "")
    assert [p.not_allowed for p in planned] == [False, False, True, False]
    assert "echo" in (planned[2].refusal or "")
    assert planned[3].tool_name == "(unnamed)"
    assert "names no tool" in (planned[3].refusal or "")
    assert set(ids) <= used


def test_generation_config_and_declarations() -> None:
    config = generation_config(
        ModelConfig(name="m", temperature=0.5, max_output_tokens=64, extra={"top_p": 0.9})
    )
    assert (config.temperature, config.max_output_tokens, config.top_p) == (0.5, 64, 0.9)
    with pytest.raises(FailedPrecondition, match=r"model\.extra"):
        generation_config(ModelConfig(name="m", extra={"no_such_setting": 1}))
    (tool,) = function_tools(list(TOOLS.values()))
    (declaration,) = tool.function_declarations or []
    assert declaration.name == "echo"
    assert declaration.parameters_json_schema == {"type": "object", "properties": {}}
    assert function_tools([]) == []


def test_outcome_results() -> None:
    (call,) = plan_calls([types.FunctionCall(name="echo", args={})], TOOLS, step=1, used_ids=set())
    ok = outcome_result(call, ToolOutcome(result={"a": 1}, duration_ms=3))
    assert (ok.status, ok.response, ok.duration_ms) == ("completed", {"output": {"a": 1}}, 3)
    tool_error = outcome_result(call, ToolOutcome(result={"a": 1}, is_error=True, error="bad"))
    assert tool_error.status == "completed"
    assert tool_error.response == {"error": "bad", "output": {"a": 1}}
    failed = outcome_result(call, ToolOutcome(result=None, is_error=True, error="x", failed=True))
    assert (failed.status, failed.response) == ("failed", {"error": "x"})
    part = ok.function_response()
    assert part.function_response is not None
    assert part.function_response.name == "echo"


def test_a_call_the_toolpool_says_failed_is_a_failed_call_not_a_tool_error() -> None:
    (call,) = plan_calls([types.FunctionCall(name="echo", args={})], TOOLS, step=1, used_ids=set())
    reply = toolpool_pb2.CallToolResponse(is_error=True, failed=True, error_message="down")
    reply.result.update({"error": "down"})
    failed = outcome_result(call, tool_outcome(reply))
    assert (failed.status, failed.response) == ("failed", {"error": "down"})
    reply.failed = False
    assert outcome_result(call, tool_outcome(reply)).status == "completed"


def test_cancel_payload() -> None:
    assert parse_cancel_payload('{"run_id": "r", "reason": "why"}') == ("r", "why")
    assert parse_cancel_payload("r2") == ("r2", DEFAULT_CANCEL_REASON)


def test_start_params_validation_names_every_field() -> None:
    request = executor_pb2.StartRunRequest(
        project_id="p", agent_name=" ", input="", max_steps=501, request_id="x" * 129
    )
    request.timeout.seconds = 0
    request.timeout.nanos = 0
    request.labels["k"] = "v" * 300
    request.task_id = "not-a-uuid"
    with pytest.raises(InvalidArgument) as raised:
        start_params(request)
    fields = {v.field for v in raised.value.violations}
    assert fields == {
        "agent_name",
        "input",
        "max_steps",
        "timeout",
        "labels['k']",
        "request_id",
        "task_id",
    }
    good = start_params(
        executor_pb2.StartRunRequest(project_id="p", agent_name="a", input="hi", max_steps=5)
    )
    assert (good.max_steps, good.timeout_s, good.request_id) == (5, None, None)
