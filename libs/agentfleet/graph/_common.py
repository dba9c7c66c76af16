"""Pieces shared by the repository modules: column lists, the executor type, id parsing."""

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


def parse_id(value: str | uuid.UUID, field: str = "id") -> uuid.UUID:
    """``value`` as a UUID; :class:`InvalidArgument` naming ``field`` when it is not one."""
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(value)
    except (ValueError, TypeError, AttributeError) as exc:
        raise InvalidArgument.for_field(field, f"{value!r} is not a valid id") from exc


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
