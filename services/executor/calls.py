"""A step's tool calls as the executor handles them: the call a model reply asked for
(:class:`PlannedCall`), its outcome (:class:`CallResult`), and the events that record them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from google.genai import types

from agentfleet import events


@dataclass(frozen=True, kw_only=True, slots=True)
class PlannedCall:
    """A function call of a model reply, as the executor will handle it."""

    tool_call_id: str
    tool_name: str
    arguments: dict[str, Any]
    source: str
    """builtin, mcp:<server> or executor (also for calls the executor refuses itself)."""
    call: types.FunctionCall
    refusal: str | None = None
    """Why the call is answered with an error instead of being run (unknown tool, bad call)."""
    not_allowed: bool = False
    """Refused because the tool is not among the agent's tools (its whitelist)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CallResult:
    """The outcome of one planned call."""

    planned: PlannedCall
    status: events.ToolCallStatusName
    response: dict[str, Any]
    """What the model gets as the FunctionResponse.response."""
    error: str = ""
    duration_ms: int = 0

    def function_response(self) -> types.Part:
        # No validation: it could change nothing (the id comes from a validated
        # FunctionCall, the name is a str and the response a str-keyed dict, validated as
        # dict[str, Any], its values kept as they are). It runs for every call of every step,
        # so each object is a copy of an empty one with its fields set: what model_construct
        # makes, without its walk over every field's default (16 us for a Part, 2.5 here).
        return _EMPTY_PART.model_copy(
            update={
                "function_response": _EMPTY_FUNCTION_RESPONSE.model_copy(
                    update={
                        "id": self.planned.call.id,
                        "name": self.planned.tool_name,
                        "response": self.response,
                    }
                )
            }
        )


_EMPTY_PART = types.Part.model_construct()
_EMPTY_FUNCTION_RESPONSE = types.FunctionResponse.model_construct()
"""Every field at its default (None) and none set: copied, never changed."""


def tool_requests(
    calls: Iterable[PlannedCall], *, agent_name: str, step: int
) -> list[events.ToolRequest]:
    """One TOOL_REQUEST per call of a model reply; a refused call shows no source."""
    return [
        events.ToolRequest(
            agent_name=agent_name,
            tool_call_id=c.tool_call_id,
            tool_name=c.tool_name,
            arguments=c.arguments,
            step=step,
            source="" if c.refusal is not None else c.source,
        )
        for c in calls
    ]


def tool_responses(
    results: Iterable[CallResult], *, agent_name: str, step: int
) -> list[events.ToolResponse]:
    """One TOOL_RESPONSE per result."""
    return [
        events.ToolResponse(
            agent_name=agent_name,
            tool_call_id=r.planned.tool_call_id,
            tool_name=r.planned.tool_name,
            status=r.status,
            result=r.response,
            error=r.error,
            duration_ms=r.duration_ms,
            step=step,
        )
        for r in results
    ]
