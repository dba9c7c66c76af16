"""Pieces shared by the repository modules: column lists and statements, the executor type,
id parsing, missing rows."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator

import asyncpg

from agentfleet.errors import AlreadyExists, InvalidArgument, NotFound

Executor = asyncpg.Pool | asyncpg.Connection
"""What statements run on: a pool (any connection) or one connection (a transaction)."""

OBJECT_COLUMNS = "id, project_id, type, key, properties, status, version, created_at, updated_at"
RELATIONSHIP_COLUMNS = "id, project_id, type, src_id, dst_id, properties, created_at"
SELECT_OBJECT = f"SELECT {OBJECT_COLUMNS} FROM kb.graph_objects WHERE project_id = $1 AND id = $2"
"""One object by ``$1`` project and ``$2`` id."""


def edge_select(direction: str, *, near: str, types: str) -> str:
    """The edges leaving (``out``) or entering (``in``) start objects, each with the object at
    its far end: edge columns as ``r_<column>``, object columns bare, then ``far_id`` and
    ``dir``. ``near`` is the condition on the near end's id (``= s.id``), ``types`` the one
    on ``r.type``; ``$1`` is the project."""
    near_end, far_end = ("src_id", "dst_id") if direction == "out" else ("dst_id", "src_id")
    return f"""
        SELECT r.id AS r_id, r.project_id AS r_project_id, r.type AS r_type,
               r.src_id AS r_src_id, r.dst_id AS r_dst_id, r.properties AS r_properties,
               r.created_at AS r_created_at, r.{far_end} AS far_id, '{direction}' AS dir,
               o.id, o.project_id, o.type, o.key, o.properties, o.status, o.version,
               o.created_at, o.updated_at
        FROM kb.graph_relationships r
        JOIN kb.graph_objects o ON o.project_id = r.project_id AND o.id = r.{far_end}
        WHERE r.project_id = $1 AND r.{near_end} {near} AND {types}
    """


def parse_id(value: str | uuid.UUID, field: str = "id") -> uuid.UUID:
    """``value`` as a UUID; :class:`InvalidArgument` naming ``field`` when it is not one."""
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(value)
    except (ValueError, TypeError, AttributeError) as exc:
        raise InvalidArgument.for_field(field, f"{value!r} is not a valid id") from exc


def canonical_id(value: str | uuid.UUID, field: str = "id") -> str:
    """``value`` as the text ids are stored and compared as (lowercase, hyphenated):
    :func:`parse_id` also accepts uppercase, braces, ``urn:uuid:`` and no hyphens, and a
    graph id kept in that form matches no text comparison (a task stored with it belongs
    to no graph)."""
    return str(parse_id(value, field))


def found(row: asyncpg.Record | None, what: str) -> asyncpg.Record:
    """``row``, or :class:`NotFound` saying that ``what`` is not found."""
    if row is None:
        raise NotFound(f"{what} not found")
    return row


@contextlib.contextmanager
def translated(what: str) -> Iterator[None]:
    """Turns constraint violations of a write about ``what`` into domain errors."""
    try:
        yield
    except asyncpg.UniqueViolationError as exc:
        raise AlreadyExists(f"{what} already exists") from exc
    except asyncpg.ForeignKeyViolationError as exc:
        raise NotFound(f"{what}: an object it refers to does not exist") from exc
    except asyncpg.CheckViolationError as exc:
        raise InvalidArgument(f"{what}: {exc.message}") from exc
