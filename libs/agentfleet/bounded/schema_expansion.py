"""How much work one check of a value against a schema can be: the schema's nodes, with
every ``$ref`` followed (pure; used by :func:`agentfleet.bounded.tenant_schema.schema_refusal`).

jsonschema evaluates a ``$ref`` afresh at each use, so a schema is as big as its tree with
each reference replaced by what it names: ``$defs`` each naming the next twice through
``allOf`` is 1 KB written and 2^17 nodes checked, at every value. Counting stops just past
the limit, so a hostile schema costs the count no more than an honest one.

A ``$ref`` back into a schema it is already inside of is recursion: counted once. Through
a keyword that moves to a part of the value (``properties``, ``items``, ...) the value's
depth ends it; in place (``allOf``, ``anyOf``, ``not``, another ``$ref``...) nothing does:
``endless``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from jsonschema_specifications import REGISTRY as METASCHEMAS
from referencing import Registry, Specification
from referencing._core import Resolver
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012, specification_with

MAX_SCHEMA_EXPANSION = 10_000
"""Most schema nodes a schema may expand to. A 64 KiB output schema written by hand is a
few thousand; each node is checked at every part of a value it applies to."""

_IN_PLACE_LISTS = ("allOf", "anyOf", "oneOf")
_IN_PLACE_ONE = ("not", "if", "then", "else")
_IN_PLACE_MAPS = ("dependentSchemas", "dependencies")
_BELOW_ONE = (
    "additionalProperties",
    "propertyNames",
    "items",
    "additionalItems",
    "contains",
    "unevaluatedItems",
    "unevaluatedProperties",
)
_BELOW_LISTS = ("prefixItems", "items")  # items: a list in drafts before 2020-12
_BELOW_MAPS = ("properties", "patternProperties")
_REFS = ("$ref", "$dynamicRef", "$recursiveRef")


@dataclass(kw_only=True, slots=True)
class Expansion:
    """What counting a schema found."""

    nodes: int = 0
    """Schema nodes visited, every ``$ref`` followed; stops just past the limit."""
    recursive: bool = False
    """A ``$ref`` leads back into a schema it is part of (counted once there)."""
    endless: str | None = None
    """A ``$ref`` leading back in place: checking any value recurses forever."""
    unresolved: str | None = None
    """The first ``$ref`` naming nothing in the schema (nor a metaschema)."""
    _open: dict[int, int] = field(default_factory=dict, repr=False)
    """id() of each schema being expanded -> the value depth it was entered at."""
    _resolved: dict[tuple[str, str], Any] = field(default_factory=dict, repr=False)
    """Lookups done, by base URI and reference: the attack repeats a few references."""


def schema_expansion(
    schema: Mapping[str, Any] | bool, *, limit: int = MAX_SCHEMA_EXPANSION
) -> Expansion:
    """Counts ``schema``'s nodes with each ``$ref`` followed, up to just past ``limit``."""
    default = DRAFT202012
    if isinstance(schema, Mapping) and isinstance(schema.get("$schema"), str):
        default = specification_with(schema["$schema"], default=DRAFT202012)
    resource = default.create_resource(schema)
    registry: Registry[Any] = METASCHEMAS.combine(Registry())
    counted = Expansion()
    try:
        _visit(schema, registry.resolver_with_root(resource), default, 0, counted, limit)
    except RecursionError:
        counted.nodes = limit + 1  # nested past what Python recurses: as good as endless
    return counted


def _stop(counted: Expansion, limit: int) -> bool:
    return counted.nodes > limit or counted.endless is not None or counted.unresolved is not None


def _visit(
    schema: Any,
    resolver: Resolver[Any],
    spec: Specification[Any],
    depth: int,
    counted: Expansion,
    limit: int,
) -> None:
    counted.nodes += 1
    if not isinstance(schema, Mapping) or _stop(counted, limit):
        return
    if "$id" in schema:
        resolver = resolver.in_subresource(spec.create_resource(schema))
    counted._open[id(schema)] = depth
    try:
        for keyword in _REFS:
            if isinstance(schema.get(keyword), str):
                _follow(schema[keyword], keyword, resolver, spec, depth, counted, limit)
        for keyword, value in schema.items():
            if _stop(counted, limit):
                return
            for child, below in _children(keyword, value):
                _visit(child, resolver, spec, depth + below, counted, limit)
    finally:
        del counted._open[id(schema)]


def _children(keyword: str, value: Any) -> list[tuple[Any, int]]:
    """Subschemas of one keyword, each with 1 when it applies to a part of the value."""
    if keyword in _IN_PLACE_LISTS and isinstance(value, list):
        return [(v, 0) for v in value]
    if keyword in _IN_PLACE_ONE:
        return [(value, 0)]
    if keyword in _IN_PLACE_MAPS and isinstance(value, Mapping):
        return [(v, 0) for v in value.values() if not isinstance(v, list)]
    if keyword in _BELOW_LISTS and isinstance(value, list):
        return [(v, 1) for v in value]
    if keyword in _BELOW_ONE:
        return [(value, 1)]
    if keyword in _BELOW_MAPS and isinstance(value, Mapping):
        return [(v, 1) for v in value.values()]
    return []


def _follow(
    ref: str,
    keyword: str,
    resolver: Resolver[Any],
    spec: Specification[Any],
    depth: int,
    counted: Expansion,
    limit: int,
) -> None:
    key = (resolver._base_uri, ref)  # the base URI is the lookup's other input
    try:
        resolved = counted._resolved.get(key)
        if resolved is None:
            resolved = resolver.lookup("#" if keyword == "$recursiveRef" else ref)
            counted._resolved[key] = resolved
    except Unresolvable:
        if keyword == "$ref":  # a dynamic anchor may be bound by the caller's schema
            counted.unresolved = ref
        counted.nodes += 1
        return
    target = resolved.contents
    entered_at = counted._open.get(id(target))
    if entered_at is not None:
        counted.nodes += 1
        counted.recursive = True
        if entered_at == depth:
            counted.endless = ref
        return
    _visit(target, resolved.resolver, spec, depth, counted, limit)
