"""JSON Schemas that come from a tenant, a model's caller or an MCP server, and the values
checked against them: one place for what such a schema may cost.

A schema is data someone else wrote, run on a process every project shares. So:

- :data:`SchemaValidator` / :func:`validator_class`: jsonschema validators whose
  ``pattern`` and ``patternProperties`` run on RE2 (:mod:`agentfleet.bounded.tenant_regex`, linear
  in the text) and whose ``uniqueItems`` hashes each item once (:func:`unique_items`,
  linear; jsonschema compares objects pairwise: 2,000 of them took 8.7 s);
- :func:`schema_refusal`: why a schema may not be stored (or an MCP tool kept): not a
  valid schema (a pattern RE2 cannot run included), a ``$ref`` that resolves nowhere, a
  loop of ``$ref`` that never reaches a value, or more than
  :data:`~agentfleet.bounded.schema_expansion.MAX_SCHEMA_EXPANSION` nodes with every ``$ref``
  followed (1 KB of ``$defs`` each naming the next twice is 2^17 nodes: seconds per value);
- :func:`first_errors`: at most :data:`MAX_REPORTED_ERRORS` validation errors, and how
  many more (counted up to :data:`MAX_COUNTED_ERRORS`): 150,000 bad items are 150,000
  errors, seconds to build and megabytes to send.

Checking a value runs off the event loop with a time limit: :mod:`agentfleet.bounded.schema_pool`.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker, validators
from jsonschema.exceptions import SchemaError, ValidationError
from jsonschema.protocols import Validator

from agentfleet.bounded.schema_expansion import MAX_SCHEMA_EXPANSION, schema_expansion
from agentfleet.bounded.tenant_regex import UnsupportedRegex, compile_regex

MAX_REPORTED_ERRORS = 20
"""Validation errors described to a caller or a model; the rest are counted."""
MAX_COUNTED_ERRORS = 10_000
"""Errors counted past the reported ones before counting stops ("more than ...")."""


def _pattern(
    validator: Validator, pattern: str, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "string"):
        return
    try:
        regex = compile_regex(pattern)
    except UnsupportedRegex as exc:
        # Only a schema not checked when written (an MCP server's, an old definition's)
        # gets here; refusing is safer than letting the value through unchecked.
        yield ValidationError(f"pattern {pattern!r} cannot be checked: {exc}")
        return
    if regex.search(instance) is None:
        yield ValidationError(f"{_quoted(instance)} does not match {pattern!r}")


def _pattern_properties(
    validator: Validator,
    pattern_properties: Mapping[str, Any],
    instance: Any,
    schema: Mapping[str, Any],
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in pattern_properties.items():
        try:
            regex = compile_regex(pattern)
        except UnsupportedRegex as exc:
            yield ValidationError(f"patternProperties {pattern!r} cannot be checked: {exc}")
            continue
        for key, value in instance.items():
            if regex.search(key) is not None:
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def json_key(value: Any) -> Hashable:
    """A hashable key equal for two JSON values exactly when jsonschema's ``equal`` holds:
    ``1 == 1.0``, ``true != 1``, objects equal whatever their key order."""
    if value is True or value is False:
        return ("bool", value)
    if isinstance(value, int | float):
        return ("number", value)  # hash(1) == hash(1.0), and 1 == 1.0
    if isinstance(value, str):
        return ("string", value)
    if isinstance(value, list | tuple):
        return ("array", tuple(json_key(item) for item in value))
    if isinstance(value, Mapping):
        return ("object", frozenset((key, json_key(item)) for key, item in value.items()))
    return ("other", value)


def unique_items(
    validator: Validator, unique: bool, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    """``uniqueItems`` in one pass of hashing instead of comparing items pairwise."""
    if not unique or not validator.is_type(instance, "array"):
        return
    seen: set[Hashable] = set()
    for index, item in enumerate(instance):
        key = json_key(item)
        if key in seen:
            yield ValidationError(f"has non-unique elements (item {index} repeats an earlier one)")
            return
        seen.add(key)


@cache
def _tenant_validator(base: type[Validator]) -> type[Validator]:
    # extend() without a version registers nothing: jsonschema's own validator_for and
    # every other user of the draft classes keep theirs, for our own trusted schemas.
    return validators.extend(
        base,
        {
            "pattern": _pattern,
            "patternProperties": _pattern_properties,
            "uniqueItems": unique_items,
        },
    )


SchemaValidator = _tenant_validator(Draft202012Validator)
"""Draft 2020-12 with RE2 patterns and hashed uniqueItems: the validator of every schema a
tenant writes."""


def validator_class(schema: Mapping[str, Any] | bool) -> type[Validator]:
    """The validator of ``schema``'s ``$schema`` draft (2020-12 without one), with RE2
    patterns and hashed uniqueItems: for schemas declared by MCP servers, which may name
    any draft."""
    return _tenant_validator(validators.validator_for(schema, default=Draft202012Validator))


@cache
def _format_checker(base: type[Validator]) -> FormatChecker:
    checker = FormatChecker(formats=())
    checker.checkers = dict(base.FORMAT_CHECKER.checkers)

    @checker.checks("regex", raises=UnsupportedRegex)
    def is_re2(instance: object) -> bool:
        if isinstance(instance, str):
            compile_regex(instance)
        return True

    return checker


def check_schema(schema: Mapping[str, Any] | bool, cls: type[Validator] = SchemaValidator) -> None:
    """``cls.check_schema`` (raising ``SchemaError``), where each ``pattern`` and
    ``patternProperties`` key must compile with RE2 rather than with ``re``."""
    base = validators.validator_for(cls.META_SCHEMA, default=cls)
    try:
        cls.check_schema(schema, format_checker=_format_checker(base))
    except SchemaError as exc:
        if exc.validator == "format" and isinstance(exc.cause, UnsupportedRegex):
            if "propertyNames" in exc.relative_schema_path:
                exc.path.append(exc.instance)  # the bad key of patternProperties
            exc.message = f"{exc.instance!r} is not a regex RE2 accepts: {exc.cause}"
        raise


def schema_refusal(
    schema: Mapping[str, Any] | bool,
    cls: type[Validator] = SchemaValidator,
    *,
    max_expansion: int = MAX_SCHEMA_EXPANSION,
) -> str | None:
    """Why ``schema`` may not be used to check values (None when it may): what
    :func:`check_schema` refuses, then what :func:`schema_expansion` finds."""
    try:
        check_schema(schema, cls)
    except SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path)
        return f"is not a valid JSON Schema at '{where}': {exc.message}"
    expansion = schema_expansion(schema, limit=max_expansion)
    if expansion.unresolved is not None:
        return f"has a $ref that resolves to nothing in the schema: {expansion.unresolved!r}"
    if expansion.endless is not None:
        return f"refers to itself ($ref {expansion.endless!r}) without end"
    if expansion.nodes > max_expansion:
        return (
            f"expands to more than {max_expansion:,} schema nodes with each $ref followed "
            "(a $ref used twice counts twice: a value is checked against each use)"
        )
    return None


@dataclass(frozen=True, kw_only=True, slots=True)
class FirstErrors:
    """The first validation errors of a value, and how many came after them."""

    errors: list[ValidationError]
    more: int
    """Errors after :attr:`errors`, counted up to :data:`MAX_COUNTED_ERRORS`."""

    @property
    def more_text(self) -> str:
        """``"and 12 more"`` / ``"and more than 10,000 more"`` / ``""``."""
        if not self.more:
            return ""
        if self.more > MAX_COUNTED_ERRORS:
            return f"and more than {MAX_COUNTED_ERRORS:,} more"
        return f"and {self.more:,} more"


def first_errors(
    errors: Iterator[ValidationError], limit: int = MAX_REPORTED_ERRORS
) -> FirstErrors:
    """The first ``limit`` of ``errors`` (a validator's lazy ``iter_errors``), the rest
    counted with an early stop: never every error of a hostile value."""
    shown = list(itertools.islice(errors, limit))
    more = sum(1 for _ in itertools.islice(errors, MAX_COUNTED_ERRORS + 1))
    return FirstErrors(errors=shown, more=more)


def _quoted(instance: str) -> str:
    """A string as a message quotes it: its start only (a value may be megabytes)."""
    return repr(instance) if len(instance) <= 80 else repr(instance[:77]) + "..."


def schema_refusals(schemas: list[Mapping[str, Any] | bool]) -> list[str | None]:
    """:func:`schema_refusal` of each schema under the draft its ``$schema`` names (an MCP
    server's), for a worker of :mod:`agentfleet.bounded.schema_pool` to run as one batch."""
    return [schema_refusal(schema, validator_class(schema)) for schema in schemas]
