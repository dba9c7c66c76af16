"""The manifest JSON schema (``manifest.schema.json``, Draft 2020-12) and its errors as
field violations, each named by path (``manifest.agents[2].flow_type``) with a short reason.

Used for whole manifests, for one ``$defs`` entry (an agent definition, ``model.extra``).

A value past its schema's size bound (``maxItems``, ``maxProperties``, ``maxLength``) is
reported by the bound and not entered by the keywords that walk it (``items``,
``additionalProperties``, ``propertyNames``, ``pattern``): 150,000 empty tags are one
violation, not 150,000 (seconds to build, a 9.9 MB trailer to send). The first
:data:`~agentfleet.bounded.tenant_schema.MAX_REPORTED_ERRORS` violations are reported, and a count.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import ValidationError
from jsonschema.protocols import Validator

from agentfleet.bounded.tenant_schema import first_errors
from agentfleet.errors import FieldViolation

_MAX_DESCRIPTION_CHARS = 300
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SCHEMA_PATH = Path(__file__).with_name("manifest.schema.json")


@cache
def manifest_schema() -> dict[str, Any]:
    """The manifest JSON schema (loaded once)."""
    return json.loads(_SCHEMA_PATH.read_text())


def _within_bound(keyword: str, bound: str, kind: str) -> _Keyword:
    """jsonschema's ``keyword``, not run on a ``kind`` past its schema's ``bound``."""
    checks = Draft202012Validator.VALIDATORS[keyword]

    def bounded(
        validator: Validator, value: Any, instance: Any, schema: Mapping[str, Any]
    ) -> Iterator[ValidationError]:
        limit = schema.get(bound)
        if isinstance(limit, int) and validator.is_type(instance, kind) and len(instance) > limit:
            return iter(())  # ``bound`` reports it, once
        return checks(validator, value, instance, schema) or iter(())

    return bounded


_Keyword = Callable[[Validator, Any, Any, Mapping[str, Any]], Iterator[ValidationError]]
_ManifestValidator = validators.extend(
    Draft202012Validator,
    {
        "items": _within_bound("items", "maxItems", "array"),
        "additionalProperties": _within_bound("additionalProperties", "maxProperties", "object"),
        "propertyNames": _within_bound("propertyNames", "maxProperties", "object"),
        "pattern": _within_bound("pattern", "maxLength", "string"),
    },
)


@cache
def _validator(definition: str | None = None) -> Validator:
    schema = manifest_schema()
    if definition is not None:
        schema = {"$schema": schema["$schema"], "$defs": schema["$defs"], "$ref": definition}
    return _ManifestValidator(schema)


def schema_violations(
    document: Any, prefix: str, *, definition: str | None = None
) -> list[FieldViolation]:
    """Schema errors of ``document`` (or of one ``$defs`` ``definition``), named by path;
    the first ones only, and how many more."""
    found = first_errors(_validator(definition).iter_errors(document))
    out = [violation for error in found.errors for violation in _describe(error, prefix)]
    if found.more:
        listed = len(found.errors)
        out.append(
            FieldViolation(prefix, f"{found.more_text} violations (the first {listed} are listed)")
        )
    return out


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
