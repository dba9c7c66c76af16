"""The manifest JSON schema (``manifest.schema.json``, Draft 2020-12) and its errors as
field violations, each named by path (``manifest.agents[2].flow_type``) with a short reason.

Used for whole manifests, for one ``$defs`` entry (an agent definition, ``model.extra``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from agentfleet.errors import FieldViolation

_MAX_DESCRIPTION_CHARS = 300
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SCHEMA_PATH = Path(__file__).with_name("manifest.schema.json")


@cache
def manifest_schema() -> dict[str, Any]:
    """The manifest JSON schema (loaded once)."""
    return json.loads(_SCHEMA_PATH.read_text())


@cache
def _validator(definition: str | None = None) -> Draft202012Validator:
    schema = manifest_schema()
    if definition is not None:
        schema = {"$schema": schema["$schema"], "$defs": schema["$defs"], "$ref": definition}
    return Draft202012Validator(schema)


def schema_violations(
    document: Any, prefix: str, *, definition: str | None = None
) -> list[FieldViolation]:
    """Schema errors of ``document`` (or of one ``$defs`` ``definition``), named by path."""
    errors = _validator(definition).iter_errors(document)
    return [violation for error in errors for violation in _describe(error, prefix)]


def _describe(error: ValidationError, prefix: str) -> list[FieldViolation]:
    path = _path(prefix, error.absolute_path)
    instance, value, kind = error.instance, error.validator_value, error.validator
    if kind == "required" and isinstance(instance, Mapping):
        transport = instance.get("transport") if "then" in error.relative_schema_path else None
        why = f"is required for the {transport} transport" if transport else "is required"
        return [FieldViolation(_path(path, [key]), why) for key in value if key not in instance]
    if kind == "additionalProperties" and isinstance(instance, Mapping):
        allowed = error.schema.get("properties", {})
        extras = [key for key in instance if key not in allowed]
        why = error.schema.get("x-additional-hint", "is not a known field")
        return [FieldViolation(_path(path, [key]), why) for key in extras]
    if kind == "pattern" and "x-pattern-hint" in error.schema:
        if "propertyNames" in error.relative_schema_path:
            # The error sits on the map; the bad key is the instance.
            path = _path(path, [str(instance)])
        description = f"{error.schema['x-pattern-hint']} (got {_short(instance)})"
    elif kind in ("maxItems", "maxProperties"):
        description = f"has {len(instance)} entries; at most {value}"
    elif kind in ("maxLength", "minLength"):
        bound = "at most" if kind == "maxLength" else "at least"
        description = f"is {len(instance)} characters long; {bound} {value}"
    elif kind == "type":
        description = f"{_short(instance)} is not of type {value!r}"
    else:
        description = error.message
    if len(description) > _MAX_DESCRIPTION_CHARS:
        description = description[: _MAX_DESCRIPTION_CHARS - 3] + "..."
    return [FieldViolation(path, description)]


def _path(prefix: str, parts: Iterable[str | int]) -> str:
    out = prefix
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _IDENTIFIER.match(part):
            out += f".{part}"
        else:
            out += f"[{part}]"
    return out


def _short(instance: Any) -> str:
    text = repr(instance)
    return text if len(text) <= 80 else text[:77] + "..."
