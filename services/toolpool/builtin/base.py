"""What a built-in tool is, what it runs with, and how its arguments are checked.

Each tool has one JSON Schema (Draft 2020-12) that validation uses in full. The model sees a
reduced copy, :attr:`BuiltinTool.parameters`, holding only the keywords Gemini function
declarations accept (type, properties, required, items, enum, description): limits,
patterns and ``additionalProperties`` are enforced here, not advertised.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import asyncpg
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from agentfleet.bounded.tenant_schema import MAX_COUNTED_ERRORS, first_errors
from agentfleet.graph import GraphRepository
from agentfleet.structs import whole_numbers
from services.toolpool.builtin.schema_parts import obj

__all__ = [
    "GEMINI_KEYWORDS",
    "BuiltinTool",
    "ToolContext",
    "ToolError",
    "ToolHandler",
    "builtin_tool",
    "gemini_parameters",
    "given",
    "refuse",
    "validate_arguments",
]

GEMINI_KEYWORDS = frozenset({"type", "properties", "required", "items", "enum", "description"})
"""Schema keywords kept in what the model sees."""
IGNORED_ARGUMENTS = frozenset({"project_id"})
"""Top-level arguments dropped before validation: scope comes from the run, never the model."""
MAX_REPORTED_VIOLATIONS = 5


class ToolError(Exception):
    """A failure the model should read and act on: returned to it as an error result
    (``{"error": message}``), never raised to the caller of CallTool."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def to_result(self) -> dict[str, Any]:
        return {"error": self.message}


@dataclass(kw_only=True, slots=True)
class ToolContext:
    """Everything a tool call runs with. The project comes from the run, not the arguments."""

    project_id: str
    run_id: str
    """Run that made the call (recorded on objects it creates, e.g. SpecTasks)."""
    pool: asyncpg.Pool
    repository: GraphRepository = field(default=None)  # type: ignore[assignment]
    """Defaults to a :class:`GraphRepository` on ``pool``."""

    def __post_init__(self) -> None:
        if self.repository is None:
            self.repository = GraphRepository(self.pool, source_run_id=self.run_id or None)


ToolHandler = Callable[[ToolContext, dict[str, Any]], Awaitable[dict[str, Any]]]
"""Runs a call with validated arguments; returns a JSON-serialisable result or raises
:class:`ToolError` (domain errors are turned into one by ``call_builtin``)."""


def given(args: dict[str, Any], *names: str) -> dict[str, Any]:
    """The optional arguments among ``names`` that the model gave, as keyword arguments:
    one left out takes the repository's default, which is the default the schema states."""
    return {name: args[name] for name in names if name in args}


def refuse(refusal: str | None) -> None:
    """Raises ``refusal`` (why a reserved type may not be written) as a :class:`ToolError`;
    nothing when it is ``None``."""
    if refusal is not None:
        raise ToolError(refusal)


@dataclass(kw_only=True, slots=True)
class BuiltinTool:
    """A tool implemented inside the toolpool."""

    name: str
    description: str
    """Shown to the model: what the tool does and when to use it."""
    schema: dict[str, Any]
    """Full JSON Schema of the arguments, used for validation."""
    handler: ToolHandler
    parameters: dict[str, Any] = field(init=False)
    """The schema reduced to :data:`GEMINI_KEYWORDS`: the function declaration's parameters."""
    validator: Draft202012Validator = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        Draft202012Validator.check_schema(self.schema)
        self.parameters = gemini_parameters(self.schema)
        self.validator = Draft202012Validator(self.schema)


def builtin_tool(
    properties: dict[str, Any], *, required: tuple[str, ...] = ()
) -> Callable[[ToolHandler], BuiltinTool]:
    """Declares a handler a built-in tool, as openai-agents' ``@function_tool`` does: named
    after the function, described to the model by its docstring (as one paragraph), taking
    an object of ``properties`` and no other key."""

    def declare(handler: ToolHandler) -> BuiltinTool:
        if not handler.__doc__:
            raise TypeError(f"{handler.__name__} needs a docstring: the model reads it")
        return BuiltinTool(
            name=handler.__name__,
            description=" ".join(handler.__doc__.split()),
            schema=obj(properties, required=required),
            handler=handler,
        )

    return declare


def gemini_parameters(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with only the keywords Gemini accepts, recursively."""
    reduced: dict[str, Any] = {}
    for keyword, value in schema.items():
        if keyword not in GEMINI_KEYWORDS:
            continue
        if keyword == "properties":
            value = {name: gemini_parameters(sub) for name, sub in value.items()}
        elif keyword == "items":
            value = gemini_parameters(value)
        reduced[keyword] = value
    return reduced


def validate_arguments(tool: BuiltinTool, args: object) -> dict[str, Any]:
    """The arguments to run ``tool`` with, or :class:`ToolError` naming each bad field.

    A top-level ``project_id`` is dropped (never used, so harmless); everything else must
    match the tool's schema, unknown keys included.
    """
    if not isinstance(args, dict):
        raise ToolError(f"invalid arguments: must be an object, got {_json_type(args)}")
    # Whole numbers as int whoever built the arguments (a Struct read elsewhere, a test): the
    # schema's "integer" accepts 5.0, and a handler slicing rows[:5.0] would raise.
    cleaned = {k: whole_numbers(v) for k, v in args.items() if k not in IGNORED_ARGUMENTS}
    # The model chooses how many errors there are: take the first ones, count the rest.
    found = first_errors(tool.validator.iter_errors(cleaned))
    if not found.errors:
        return cleaned
    errors = sorted(found.errors, key=lambda e: list(map(str, e.path)))
    problems = [problem for error in errors for problem in _describe(error)]
    shown = problems[:MAX_REPORTED_VIOLATIONS]
    more = len(problems) - len(shown) + found.more
    more_text = (
        f"more than {MAX_COUNTED_ERRORS:,}" if found.more > MAX_COUNTED_ERRORS else str(more)
    )
    message = "invalid arguments: " + "; ".join(shown) + (f"; and {more_text} more" if more else "")
    raise ToolError(message)


def _describe(error: ValidationError) -> Iterable[str]:
    """``field: what is wrong`` for one validation error (an instance is never echoed:
    it may be huge)."""
    path = _path(error.absolute_path)
    value = error.validator_value
    match error.validator:
        case "required":
            missing = [name for name in value if name not in error.instance]
            return [f"{_join(path, name)}: is required" for name in missing]
        case "additionalProperties":
            known = set(error.schema.get("properties", {}))
            extra = sorted(str(name) for name in error.instance if name not in known)
            return [f"{_join(path, name)}: unknown argument" for name in extra]
        case "type":
            return [f"{path or 'arguments'}: must be {_a(value)}, got {_json_type(error.instance)}"]
        case "enum":
            return [f"{path}: must be one of {', '.join(map(str, value))}"]
        case "minLength":
            return [f"{path}: must not be empty" if value == 1 else f"{path}: too short"]
        case "minItems":
            return [f"{path}: needs at least {value} item{'s' if value != 1 else ''}"]
        case keyword if keyword in _LIMIT_MESSAGES:
            return [f"{path}: {_LIMIT_MESSAGES[keyword].format(value)}"]
        case _:
            return [f"{path or 'arguments'}: {error.message[:200]}"]


_LIMIT_MESSAGES = {
    "maxLength": "longer than {} characters",
    "maxItems": "more than {} items",
    "maxProperties": "more than {} keys",
    "minimum": "must be at least {}",
    "maximum": "must be at most {}",
    "pattern": "must match {}",
    "uniqueItems": "items must be unique",
}
"""What is wrong, by the keyword a value broke, with the keyword's value in ``{}``."""


def _path(parts: Iterable[str | int]) -> str:
    """``tasks[2].title`` from ``["tasks", 2, "title"]``."""
    text = ""
    for part in parts:
        text = f"{text}[{part}]" if isinstance(part, int) else _join(text, part)
    return text


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _a(json_type: str | list[str]) -> str:
    names = [json_type] if isinstance(json_type, str) else json_type
    return " or ".join(("an " if n[0] in "aeiou" else "a ") + n for n in names)


# bool before int: a bool is an int to isinstance, but a boolean to JSON.
_JSON_TYPES: tuple[tuple[type, str], ...] = (
    (type(None), "null"),
    (bool, "boolean"),
    (int, "integer"),
    (float, "number"),
    (str, "string"),
    (list, "array"),
    (dict, "object"),
)


def _json_type(value: object) -> str:
    return next((name for t, name in _JSON_TYPES if isinstance(value, t)), type(value).__name__)
