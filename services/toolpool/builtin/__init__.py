"""Built-in tools of the toolpool: the knowledge graph (entities, relationships, traversal,
search) and create_subtasks, each with a JSON Schema the model sees and arguments validated
before use. Project scope always comes from :class:`ToolContext`, never from arguments."""

from services.toolpool.builtin.base import (
    BuiltinTool,
    ToolContext,
    ToolError,
    ToolHandler,
    gemini_parameters,
    validate_arguments,
)
from services.toolpool.builtin.registry import BUILTIN_TOOLS, call_builtin

__all__ = [
    "BUILTIN_TOOLS",
    "BuiltinTool",
    "ToolContext",
    "ToolError",
    "ToolHandler",
    "call_builtin",
    "gemini_parameters",
    "validate_arguments",
]
