"""Pure pieces of a step: the Gemini request from a definition and its tools, and the plan
for a reply's function calls (which run, which are answered with an error). No I/O."""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import pydantic
from google.genai import types

from agentfleet import events
from agentfleet.errors import FailedPrecondition
from services.executor.calls import CallResult, PlannedCall
from services.executor.registry.manifest_schema import schema_violations
from services.executor.registry.model_config import ModelConfig
from services.executor.tools.tool_gateway import ResolvedTool, ToolOutcome

EMPTY_OBJECT_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}
EXTRA_SCHEMA = "#/$defs/model_extra"
"""The one allowlist of ``model.extra`` (generation settings only), in manifest.schema.json."""
NAME_SCHEMA = "#/$defs/model_name"
"""What a model name may be (an id, never a resource path), in manifest.schema.json."""


def generation_config(model: ModelConfig) -> types.GenerateContentConfig:
    """The definition's generation settings.

    ``name`` and ``extra`` are checked again here against the manifest schema
    (``$defs/model_name``, ``$defs/model_extra``), since a row written before the rule, or
    straight into the database, never went through UpsertAgentDefinition:
    :class:`FailedPrecondition` naming the first bad field, before anything is sent.
    """
    violations = schema_violations(
        model.name, "model.name", definition=NAME_SCHEMA
    ) + schema_violations(model.extra, "model.extra", definition=EXTRA_SCHEMA)
    for index, name in enumerate(model.fallback_models):
        violations += schema_violations(
            name, f"model.fallback_models[{index}]", definition=NAME_SCHEMA
        )
    if violations:
        first = violations[0]
        raise FailedPrecondition(
            f"{first.field}: {first.description}; the run is refused and nothing was sent "
            "to the model (fix the agent definition)"
        )
    values: dict[str, Any] = dict(model.extra)
    if model.temperature is not None:
        values["temperature"] = model.temperature
    if model.max_output_tokens is not None:
        values["max_output_tokens"] = model.max_output_tokens
    try:
        return types.GenerateContentConfig(**values)
    except pydantic.ValidationError as exc:
        raise FailedPrecondition(f"model.extra is not a valid generation config: {exc}") from exc


def function_tools(tools: Collection[ResolvedTool]) -> list[types.Tool]:
    """One ``types.Tool`` declaring every tool as a function with its JSON schema."""
    if not tools:
        return []
    declarations = [
        types.FunctionDeclaration(
            name=tool.name,
            description=tool.description,
            parameters_json_schema=tool.parameters or EMPTY_OBJECT_SCHEMA,
        )
        for tool in tools
    ]
    return [types.Tool(function_declarations=declarations)]


def plan_calls(
    calls: Sequence[types.FunctionCall],
    tools: Mapping[str, ResolvedTool],
    *,
    step: int,
    used_ids: set[str],
) -> list[PlannedCall]:
    """Gives each call a run-unique tool_call_id and decides whether it can run.

    Unknown tools and malformed calls (no name, arguments not an object) get a ``refusal``
    the model will read as the tool's error. ``used_ids`` is updated.
    """
    planned: list[PlannedCall] = []
    for index, call in enumerate(calls, start=1):
        call_id = call.id if call.id and call.id not in used_ids else None
        tool_call_id = call_id or f"call-{step}-{index}-{uuid.uuid4().hex[:8]}"
        used_ids.add(tool_call_id)
        name = call.name or ""
        arguments = call.args if call.args is not None else {}
        refusal: str | None = None
        not_allowed = False
        if not name:
            refusal = "malformed function call: it names no tool"
        elif not isinstance(arguments, dict):
            refusal = f"malformed function call: arguments of {name!r} are not a JSON object"
        elif name not in tools:
            # The executor knows only the tools the agent may call, so a tool that exists
            # elsewhere and one that exists nowhere read alike: neither is this agent's.
            available = ", ".join(sorted(tools)) or "none"
            refusal = (
                f"tool {name!r} is not allowed for this agent (not among its tools); "
                f"the tools you can call are: {available}"
            )
            not_allowed = True
        tool = tools.get(name)
        planned.append(
            PlannedCall(
                tool_call_id=tool_call_id,
                tool_name=name or "(unnamed)",
                arguments=arguments if isinstance(arguments, dict) else {},
                source=tool.source if tool is not None else "executor",
                call=call,
                refusal=refusal,
                not_allowed=not_allowed,
            )
        )
    return planned


def not_allowed_events(
    planned: Sequence[PlannedCall], *, agent_name: str, step: int
) -> list[events.RunEvent]:
    """One SAFETY ``tool_not_allowed`` for the calls of a step outside the agent's tools."""
    refused = [c.tool_name[:200] for c in planned if c.not_allowed]
    if not refused:
        return []
    return [
        events.Safety(
            agent_name=agent_name,
            kind="tool_not_allowed",
            message=f"{len(refused)} call(s) to tools outside the agent's tools refused",
            details={"tool_names": refused},
            step=step,
        )
    ]


def refused_result(planned: PlannedCall) -> CallResult:
    """The answer to a call the executor did not run."""
    error = planned.refusal or "refused"
    return CallResult(planned=planned, status="refused", response={"error": error}, error=error)


def outcome_result(planned: PlannedCall, outcome: ToolOutcome) -> CallResult:
    """The answer to a call that ran (or failed to)."""
    if outcome.failed:
        return CallResult(
            planned=planned,
            status="failed",
            response={"error": outcome.error},
            error=outcome.error,
            duration_ms=outcome.duration_ms,
        )
    response: dict[str, Any] = {"output": outcome.result or {}}
    if outcome.is_error:
        response = {"error": outcome.error or "the tool reported an error", **response}
    return CallResult(
        planned=planned,
        status="completed",
        response=response,
        error=outcome.error if outcome.is_error else "",
        duration_ms=outcome.duration_ms,
    )


def interrupted_result(planned: PlannedCall, why: str) -> CallResult:
    """The answer to a call cut short by the run's end (cancel or failure)."""
    return CallResult(planned=planned, status="failed", response={"error": why}, error=why)


def interrupted_call_result(planned: PlannedCall, why: str) -> CallResult:
    """The answer to a call that was cut short and never finished (timeout, crash): status
    ``interrupted``; the model reads ``why`` as the tool's error."""
    return CallResult(planned=planned, status="interrupted", response={"error": why}, error=why)
