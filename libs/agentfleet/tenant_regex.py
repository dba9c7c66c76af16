"""Regular expressions that come from a tenant or an MCP server, run by RE2.

Python's ``re`` backtracks: ``^(a+)+$`` against ``"a" * 26 + "!"`` takes seconds, doubling
with each character, and it runs on the event loop shared by every project's runs. RE2
(``google-re2``) matches in time linear in the text, and refuses what it cannot match that
way (backreferences, lookarounds) when the pattern is compiled. So every regex written by
someone other than us goes through here:

- :func:`compile_regex`: one pattern (approval rules' ``when.matches``);
- :func:`validator_class` / :data:`SchemaValidator`: jsonschema validators whose
  ``pattern`` and ``patternProperties`` use RE2 (``output_schema``, a tool's parameter and
  output schemas);
- :func:`check_schema`: the draft's ``check_schema``, where ``format: regex`` in the
  metaschema (every ``pattern`` and ``patternProperties`` key) must compile with RE2, so a
  schema RE2 cannot run is refused when written.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from functools import cache, lru_cache
from typing import Any, Protocol

import re2
from jsonschema import Draft202012Validator, FormatChecker, validators
from jsonschema.exceptions import SchemaError, ValidationError
from jsonschema.protocols import Validator

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a refused pattern is the caller's error, not a log line


class Regex(Protocol):
    """What a compiled pattern offers (``re2._Regexp`` has no type stubs)."""

    def search(self, text: str) -> object | None: ...


class UnsupportedRegex(ValueError):
    """The pattern is malformed or uses what RE2 does not run in linear time."""


@lru_cache(maxsize=1024)  # approval rules are parsed at every step
def compile_regex(pattern: str) -> Regex:
    """``pattern`` compiled by RE2; :class:`UnsupportedRegex` saying why it cannot be."""
    try:
        return re2.compile(pattern, options=_OPTIONS)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode(errors="replace")
        raise UnsupportedRegex(
            f"{reason} (patterns run on RE2: no backreferences or lookarounds)"
        ) from None


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
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


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


@cache
def _with_re2(base: type[Validator]) -> type[Validator]:
    # extend() without a version registers nothing: jsonschema's own validator_for and
    # every other user of the draft classes keep ``re``, for our own trusted schemas.
    return validators.extend(base, {"pattern": _pattern, "patternProperties": _pattern_properties})


SchemaValidator = _with_re2(Draft202012Validator)
"""Draft 2020-12 with RE2 patterns: the validator of every schema a tenant writes."""


def validator_class(schema: Mapping[str, Any] | bool) -> type[Validator]:
    """The validator of ``schema``'s ``$schema`` draft (2020-12 without one), with RE2
    patterns: for schemas declared by MCP servers, which may name any draft."""
    return _with_re2(validators.validator_for(schema, default=Draft202012Validator))


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
