"""The tool catalog of a project and the resolution of whitelist patterns (DESIGN §6, §8).

Everything here is pure: the catalog is assembled by the caller from the built-in tools,
the MCP servers' tool lists and the coordination tools, and resolution is plain matching,
so the whitelist rules are tested without I/O.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agentfleet.errors import FieldViolation, InvalidArgument, NotFound
from agentfleet.run_limits import spawn_tool_refusal

SourceKind = Literal["builtin", "mcp", "executor"]

_GLOB_CHARS = re.compile(r"[*?\[]")
_PATTERN = re.compile(r"^[A-Za-z0-9_.\-*?\[\]!]{1,200}$")


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolSpec:
    """One tool as the model sees it, and who runs it."""

    name: str
    """Name in the project's catalog (MCP tools carry their server's prefix)."""
    description: str
    parameters: dict[str, Any]
    """JSON Schema of the arguments object."""
    source_kind: SourceKind
    mcp_server: str = ""
    mcp_tool_name: str = ""
    """The tool's own name on its MCP server."""
    output_schema: dict[str, Any] = field(default_factory=dict)

    @property
    def executed_by_executor(self) -> bool:
        return self.source_kind == "executor"

    @property
    def source_label(self) -> str:
        """The ``source`` column of a tool call row: builtin, executor or mcp:<server>."""
        return f"mcp:{self.mcp_server}" if self.source_kind == "mcp" else self.source_kind


COORDINATION_TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        name="list_available_agents",
        description=(
            "Lists the agents of this project you can spawn: name, description, tools and "
            "flow type of each. Call it before spawn_agents to choose."
        ),
        parameters={"type": "object", "properties": {}},
        source_kind="executor",
    ),
    ToolSpec(
        name="spawn_agents",
        description=(
            "Runs one sub-agent per task, all in parallel, and waits for them. Returns each "
            "child's run id, status and summary; failed children are listed apart."
        ),
        parameters={
            "type": "object",
            "properties": {
                "tasks": {
                    "type": "array",
                    "description": "One entry per child run.",
                    "items": {
                        "type": "object",
                        "properties": {
                            "agent_name": {"type": "string", "description": "Agent to run."},
                            "description": {
                                "type": "string",
                                "description": "Short label of the task.",
                            },
                            "prompt": {"type": "string", "description": "The child's input."},
                            "timeout_s": {
                                "type": "number",
                                "description": "Time limit of the child in seconds.",
                            },
                            "resume_run_id": {
                                "type": "string",
                                "description": (
                                    "Continue this paused child run instead; prompt is "
                                    "extra input (for a remote agent that asks for "
                                    "input: the answer)."
                                ),
                            },
                        },
                        "required": ["agent_name", "prompt"],
                    },
                },
                "max_tokens_per_subtask": {
                    "type": "integer",
                    "description": "Token budget of each child; over it a child pauses.",
                },
            },
            "required": ["tasks"],
        },
        source_kind="executor",
    ),
    ToolSpec(
        name="exit_loop",
        description="Ends the enclosing loop flow after this agent finishes.",
        parameters={
            "type": "object",
            "properties": {"reason": {"type": "string", "description": "Why the loop ends."}},
        },
        source_kind="executor",
    ),
)


def is_glob(pattern: str) -> bool:
    return _GLOB_CHARS.search(pattern) is not None


def validate_patterns(patterns: Sequence[str], *, field_name: str = "patterns") -> None:
    """Refuses empty, overlong or odd-character patterns, naming each one."""
    violations = [
        FieldViolation(f"{field_name}[{i}]", f"{p!r} is not a tool name or glob")
        for i, p in enumerate(patterns)
        if not _PATTERN.match(p)
    ]
    if violations:
        raise InvalidArgument.for_fields(violations)


def _kept_at_depth(name: str, depth: int, exact: bool) -> bool:
    """DESIGN §6: spawn tools vanish below the top unless named exactly, and at depth 2."""
    return spawn_tool_refusal(name, depth=depth, named_exactly=exact) is None


def resolve(catalog: Iterable[ToolSpec], patterns: Sequence[str], depth: int) -> list[ToolSpec]:
    """The tools ``patterns`` select at ``depth``, by name.

    Raises NotFound naming every exact name that is not in the catalog.
    """
    if depth < 0:
        raise InvalidArgument.for_field("depth", "must not be negative")
    validate_patterns(patterns)
    by_name = {tool.name: tool for tool in catalog}
    chosen: dict[str, ToolSpec] = {}
    missing: list[str] = []
    for pattern in patterns:
        if is_glob(pattern):
            for name in [n for n in by_name if fnmatch.fnmatchcase(n, pattern)]:
                if _kept_at_depth(name, depth, exact=False):
                    chosen[name] = by_name[name]
        elif pattern in by_name:
            if _kept_at_depth(pattern, depth, exact=True):
                chosen[pattern] = by_name[pattern]
        else:
            missing.append(pattern)
    if missing:
        names = ", ".join(repr(m) for m in missing)
        raise NotFound(f"no tool named {names} in the project's catalog")
    return [chosen[name] for name in sorted(chosen)]


def allows(patterns: Sequence[str], name: str, depth: int) -> bool:
    """Whether a whitelist admits ``name`` at ``depth`` (the tool's existence aside)."""
    exact = name in patterns
    if not exact and not any(is_glob(p) and fnmatch.fnmatchcase(name, p) for p in patterns):
        return False
    if exact and _kept_at_depth(name, depth, exact=True):
        return True
    return _kept_at_depth(name, depth, exact=False)
