"""Named SQL statements kept in a ``.sql`` file, loaded once (procrastinate's ``queries.sql``).

A file is a list of blocks, each opened by a header comment::

    -- name: append_events
    -- What the statement does (comment lines right under the header are its docstring).
    WITH numbered AS (... WHERE id = :run_id::uuid ...)
    -- include: insert_events
    SELECT ...

    -- fragment: insert_events
    ev AS (...)

A ``fragment`` is text that several statements share; a statement embeds it with an
``-- include: <fragment>`` line. Parameters are named (``:run_id``) so the statement states
its own contract; loading turns them into asyncpg's ``$1, $2 ...`` in order of first use, and
:meth:`Statement.arguments` lays a mapping of values out in that order.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_HEADER = re.compile(r"^-- (name|fragment): ([a-z_][a-z0-9_]*)\s*$")
_INCLUDE = re.compile(r"^-- include: ([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
# ``:name`` but not the second colon of a ``::type`` cast, nor inside a '...' literal
# (matched whole first and kept as it is).
_PARAMETER = re.compile(r"'(?:[^']|'')*'|(?<!:):([a-z_][a-z0-9_]*)")


class SqlFileError(ValueError):
    """A ``.sql`` file of named blocks is malformed (a bug in the file, found at import)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Statement:
    """One named statement, ready for asyncpg."""

    name: str
    text: str
    """The SQL with ``$n`` placeholders."""
    parameters: tuple[str, ...]
    """The parameter names, ``parameters[0]`` being ``$1``."""

    def arguments(self, values: Mapping[str, Any]) -> tuple[Any, ...]:
        """``values`` in placeholder order; ValueError naming any parameter missing or unknown."""
        if len(values) != len(self.parameters) or not all(n in values for n in self.parameters):
            missing = sorted(set(self.parameters) - set(values))
            unknown = sorted(set(values) - set(self.parameters))
            raise ValueError(f"statement {self.name}: missing {missing}, unknown {unknown}")
        return tuple(values[n] for n in self.parameters)


def _blocks(text: str, source: str) -> dict[str, dict[str, str]]:
    """``{"name": {statement: sql}, "fragment": {fragment: sql}}`` of a file's text."""
    blocks: dict[str, dict[str, list[str]]] = {"name": {}, "fragment": {}}
    current: list[str] | None = None
    for line in text.splitlines():
        header = _HEADER.match(line)
        if header is not None:
            kind, name = header.groups()
            if name in blocks["name"] or name in blocks["fragment"]:
                raise SqlFileError(f"{source}: block {name!r} defined twice")
            current = blocks[kind][name] = []
        elif current is not None:
            current.append(line)
        elif line.strip() and not line.startswith("--"):
            raise SqlFileError(f"{source}: SQL before the first '-- name:' header")
    return {
        kind: {name: _code("\n".join(lines)) for name, lines in named.items()}
        for kind, named in blocks.items()
    }


def _code(text: str) -> str:
    """``text`` without its comment lines (a block's documentation; dropped so a ``:word`` in
    one is no parameter), its includes kept."""
    lines = text.strip().splitlines()
    return "\n".join(
        line for line in lines if not line.lstrip().startswith("--") or _INCLUDE.match(line)
    )


def _numbered(name: str, text: str) -> Statement:
    order: list[str] = []

    def placeholder(match: re.Match[str]) -> str:
        parameter = match.group(1)
        if parameter is None:
            return match.group(0)
        if parameter not in order:
            order.append(parameter)
        return f"${order.index(parameter) + 1}"

    return Statement(name=name, text=_PARAMETER.sub(placeholder, text), parameters=tuple(order))


def load_blocks(path: Path) -> tuple[dict[str, Statement], dict[str, str]]:
    """The named statements of ``path`` with their fragments embedded, and the fragments (for
    :func:`compose`); SqlFileError if a block is repeated or an include names no fragment."""
    blocks = _blocks(path.read_text(encoding="utf-8"), path.name)
    fragments = blocks["fragment"]
    statements = {
        name: compose(name, text, fragments, source=path.name)
        for name, text in blocks["name"].items()
    }
    return statements, fragments


def load_statements(path: Path) -> dict[str, Statement]:
    """The named statements of ``path`` (:func:`load_blocks`)."""
    return load_blocks(path)[0]


def compose(
    name: str, text: str, fragments: Mapping[str, str], *, source: str = "<statement>"
) -> Statement:
    """A statement written elsewhere (in Python, sharing text with other statements) that
    embeds ``fragments`` of a file with ``-- include:`` lines; SqlFileError naming ``source``
    if an include names no fragment."""

    including: list[str] = []

    def embed(match: re.Match[str]) -> str:
        included = match.group(1)
        fragment = fragments.get(included)
        if fragment is None:
            raise SqlFileError(f"{source}: include of unknown fragment {included!r}")
        if included in including:
            raise SqlFileError(f"{source}: fragment {included!r} includes itself")
        including.append(included)
        text = _INCLUDE.sub(embed, fragment)  # a fragment may include others
        including.pop()
        return text

    return _numbered(name, _INCLUDE.sub(embed, _code(text)))
