"""A definition's ``output_schema`` (issue #19): checked when written, used to ask for the
answer, and to check it. Pure: no I/O (see :mod:`services.executor.run_path.structured_output`).

Schemas are checked when written (:func:`output_schema_violations`): a JSON object, at most
:data:`MAX_OUTPUT_SCHEMA_BYTES` serialized and :data:`MAX_SCHEMA_DEPTH` deep, a valid draft
2020-12 schema of an object whose patterns RE2 compiles (they are matched by RE2), whose
``$ref``s resolve, loop nowhere in place and expand to a bounded number of nodes (all in
:func:`agentfleet.bounded.tenant_schema.schema_refusal`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from google.genai import types

from agentfleet.bounded.schema_pool import SchemaCheckTimeout, schema_pool
from agentfleet.bounded.tenant_schema import schema_refusal
from agentfleet.errors import FieldViolation

MAX_OUTPUT_SCHEMA_BYTES = 64 * 1024
"""Largest output_schema, serialized as compact JSON."""
MAX_SCHEMA_DEPTH = 32
"""Deepest nesting of objects and arrays in an output_schema."""
MAX_OUTPUT_DEPTH = 32
"""Deepest nesting of objects and arrays in a run's output."""
MAX_ERROR_CHARS = 500
"""Longest validation message (sent to the model, stored as the run's error)."""


def output_schema_violations(schema: Any, field: str) -> list[FieldViolation]:
    """Why ``schema`` cannot be an output_schema (empty when it can), naming ``field``."""
    if schema is None:
        return []
    if not isinstance(schema, Mapping):
        return [FieldViolation(field, "must be a JSON object (a JSON Schema)")]
    depth = _depth(schema)
    if depth > MAX_SCHEMA_DEPTH:
        return [FieldViolation(field, f"is nested deeper than {MAX_SCHEMA_DEPTH} levels")]
    size = len(json.dumps(schema, separators=(",", ":")).encode())
    if size > MAX_OUTPUT_SCHEMA_BYTES:
        return [
            FieldViolation(
                field, f"is {size} bytes; the limit is {MAX_OUTPUT_SCHEMA_BYTES} bytes (64 KiB)"
            )
        ]
    refusal = schema_refusal(schema)
    if refusal is not None:
        return [FieldViolation(field, refusal)]
    if schema.get("type") != "object":
        return [FieldViolation(field, 'must describe a JSON object ("type": "object")')]
    return []


def _depth(value: Any, level: int = 0, *, limit: int = MAX_SCHEMA_DEPTH) -> int:
    """Nesting depth of a JSON value, stopping just past ``limit``."""
    if level > limit:
        return level
    if isinstance(value, Mapping):
        return max((_depth(v, level + 1, limit=limit) for v in value.values()), default=level + 1)
    if isinstance(value, list):
        return max((_depth(v, level + 1, limit=limit) for v in value), default=level + 1)
    return level


def with_output_schema(
    config: types.GenerateContentConfig, schema: Mapping[str, Any]
) -> types.GenerateContentConfig:
    """``config`` asking for JSON of ``schema``."""
    return config.model_copy(
        update={"response_mime_type": "application/json", "response_json_schema": dict(schema)}
    )


async def check_output(schema: Mapping[str, Any], text: str) -> tuple[dict[str, Any] | None, str]:
    """The answer as a JSON object valid against ``schema``, or None and why not (a short
    message: it goes back to the model, into the run's error and its events). Checked off
    the event loop, within a time limit (:mod:`agentfleet.bounded.schema_pool`)."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        return None, _short(f"output is not JSON: {exc}")
    except RecursionError:
        return None, f"output is nested deeper than {MAX_OUTPUT_DEPTH} levels"
    if not isinstance(value, dict):
        return None, f"output must be a JSON object, not {type(value).__name__}"
    if _depth(value, limit=MAX_OUTPUT_DEPTH) > MAX_OUTPUT_DEPTH:
        # Stored as a protobuf Struct, whose decoders stop at 100 nested messages.
        return None, f"output is nested deeper than {MAX_OUTPUT_DEPTH} levels"
    try:
        verdict = await schema_pool().check(schema, value)
    except SchemaCheckTimeout as exc:
        return None, f"output could not be checked against output_schema: {exc}"
    if verdict.schema_error is not None:
        return None, _short(f"output_schema {verdict.schema_error}")
    if verdict.ok:
        return value, ""
    problem = verdict.problems[0]
    return None, _short(
        f"output does not match output_schema at {_where(problem.path)}: {problem.message}"
    )


def _short(message: str) -> str:
    """``message`` cut to :data:`MAX_ERROR_CHARS` (a validation message quotes the value)."""
    if len(message) <= MAX_ERROR_CHARS:
        return message
    return message[: MAX_ERROR_CHARS - 3] + "..."


def _where(parts: Iterable[str | int]) -> str:
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)
    return "$" + path


def with_schema_without_tools(
    config: types.GenerateContentConfig,
    schema: Mapping[str, Any] | None,
    tools: Mapping[str, Any],
) -> types.GenerateContentConfig:
    """The config of every call of a run: with the output schema when the definition has
    one and the run has no tools (Gemini 2.x takes no schema with function calling; a run
    with tools gets the schema on its final-answer call only)."""
    if schema is None or tools:
        return config
    return with_output_schema(config, schema)
