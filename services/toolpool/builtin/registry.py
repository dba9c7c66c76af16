"""The registry of built-in tools and the one entry point that runs them."""

from __future__ import annotations

from typing import Any

from agentfleet.errors import (
    Aborted,
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
)
from services.toolpool.builtin.base import BuiltinTool, ToolContext, ToolError, validate_arguments
from services.toolpool.builtin.discussion_tools import DISCUSSION_TOOLS
from services.toolpool.builtin.entity_tools import ENTITY_TOOLS
from services.toolpool.builtin.relationship_tools import RELATIONSHIP_TOOLS
from services.toolpool.builtin.search_tools import SEARCH_TOOLS
from services.toolpool.builtin.subtasks import SUBTASK_TOOLS

__all__ = ["BUILTIN_TOOLS", "call_builtin"]

BUILTIN_TOOLS: dict[str, BuiltinTool] = {
    tool.name: tool
    for tool in [
        *ENTITY_TOOLS,
        *RELATIONSHIP_TOOLS,
        *SEARCH_TOOLS,
        *SUBTASK_TOOLS,
        *DISCUSSION_TOOLS,
    ]
}
"""Every built-in tool by name."""

# What the model did wrong or must react to: shown to it as an error result. Anything else
# (the database is down, a bug) is the caller's error to report with its own status.
_MODEL_FACING_ERRORS = (InvalidArgument, NotFound, AlreadyExists, Aborted, FailedPrecondition)


async def call_builtin(ctx: ToolContext, name: str, args: object) -> dict[str, Any]:
    """Validates ``args`` and runs the built-in tool ``name`` in ``ctx``'s project.

    Returns the tool's JSON-serialisable result. Raises :class:`ToolError` for anything
    the model should see as an error result (bad arguments, missing or foreign ids, stale
    versions, cycles); :class:`NotFound` (a gRPC error, not a tool error) if no built-in
    tool has that name; other failures propagate unchanged.
    """
    tool = BUILTIN_TOOLS.get(name)
    if tool is None:
        raise NotFound(f"no built-in tool named {name!r}")
    valid = validate_arguments(tool, args)
    try:
        return await tool.handler(ctx, valid)
    except _MODEL_FACING_ERRORS as exc:
        raise ToolError(exc.message) from exc
