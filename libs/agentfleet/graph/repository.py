"""The knowledge graph repository: objects and relationships of ``kb.graph_*``.

Every method takes ``project_id`` first and every statement filters by it: an id of another
project behaves exactly like a missing id (:class:`NotFound`). Driver errors become domain
errors here (unique key -> :class:`AlreadyExists`, a stale version -> :class:`Aborted`, a
malformed id -> :class:`InvalidArgument`). Relationships live in
:mod:`agentfleet.graph.relationships`, traversal and search in :mod:`agentfleet.graph.reads`;
all are reached through this one class.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import asyncpg

from agentfleet.errors import Aborted, NotFound
from agentfleet.graph._common import (
    OBJECT_COLUMNS,
    SELECT_OBJECT,
    Executor,
    found,
    parse_id,
    translated,
)
from agentfleet.graph.models import GraphObject, ObjectPage
from agentfleet.graph.reads import GraphReads
from agentfleet.graph.relationships import GraphRelationships
from agentfleet.observability.telemetry import current_traceparent
from agentfleet.postgres.pagination import decode_page_token, encode_page_token

__all__ = ["GraphRepository", "NewObject", "parse_id"]

MAX_PAGE_SIZE = 200


@dataclass(frozen=True, kw_only=True, slots=True)
class NewObject:
    """An object to create with :meth:`GraphRepository.create_objects`."""

    type: str
    properties: dict[str, Any]
    key: str | None = None
    id: uuid.UUID = field(default_factory=uuid.uuid4)
    """Chosen by the caller so edges between new objects can be written in the same batch."""


class GraphRepository(GraphRelationships, GraphReads):
    """Objects and relationships of one database, scoped per call by ``project_id``.

    Built on a pool (each method runs on any pooled connection) or, through :meth:`bound`
    or :meth:`transaction`, on one connection so several calls share a transaction.
    """

    def __init__(self, db: Executor, *, source_run_id: str | None = None) -> None:
        self._db = db
        self._source_run_id = source_run_id
        """The run whose tool call makes these writes: named to the graph trigger of
        migration 0027 (``agentfleet.source_run_id``), so the runs the writes trigger
        continue that run's chain of triggered runs (and stop at its cap)."""

    @classmethod
    def bound(cls, conn: asyncpg.Connection) -> GraphRepository:
        """The same repository on ``conn``, e.g. inside a transaction the caller owns."""
        return cls(conn)

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[GraphRepository]:
        """A repository whose calls share one transaction, committed on a clean exit."""
        if isinstance(self._db, asyncpg.Connection):
            async with self._db.transaction():
                yield self
            return
        async with self._db.acquire() as conn, conn.transaction():
            yield GraphRepository(conn, source_run_id=self._source_run_id)

    @contextlib.asynccontextmanager
    async def _writer(self) -> AsyncIterator[Executor]:
        """Where a write goes: ``self._db``, or, for a run's writes or a traced writer's, a
        transaction that first names the run and the writer's span to the graph trigger
        (one more statement, only on that path; a run's writes named both in one)."""
        parent = current_traceparent()
        if self._source_run_id is None and parent is None:
            yield self._db
            return
        if isinstance(self._db, asyncpg.Connection) and self._db.is_in_transaction():
            await _name_writer(self._db, self._source_run_id, parent)
            yield self._db
            return
        async with contextlib.AsyncExitStack() as stack:
            if isinstance(self._db, asyncpg.Connection):
                conn = self._db
            else:
                conn = await stack.enter_async_context(self._db.acquire())
            await stack.enter_async_context(conn.transaction())
            await _name_writer(conn, self._source_run_id, parent)
            yield conn

    @property
    def connection(self) -> asyncpg.Connection | None:
        """The bound connection (``None`` on a pool), for helpers of :mod:`.tasks`."""
        return self._db if isinstance(self._db, asyncpg.Connection) else None

    # -- objects -----------------------------------------------------------------------

    async def create_object(
        self, project_id: str, *, type: str, properties: Mapping[str, Any], key: str | None = None
    ) -> GraphObject:
        """Inserts one object at version 1. :class:`AlreadyExists` if ``key`` is taken."""
        with translated(f"{type} with key {key!r}"):
            async with self._writer() as db:
                row = await db.fetchrow(
                    f"""
                    INSERT INTO kb.graph_objects (project_id, type, key, properties)
                    VALUES ($1, $2, $3, $4::jsonb)
                    RETURNING {OBJECT_COLUMNS}
                    """,
                    project_id,
                    type,
                    key,
                    dict(properties),
                )
        return GraphObject.from_row(row)

    async def create_objects(
        self, project_id: str, objects: Sequence[NewObject]
    ) -> list[GraphObject]:
        """Inserts several objects in one statement; returned in the order given."""
        with translated("an object with one of these keys"):
            async with self._writer() as db:
                rows = await db.fetch(
                    f"""
                    INSERT INTO kb.graph_objects (id, project_id, type, key, properties)
                    SELECT n.id, $1, n.type, n.key, n.properties
                    FROM unnest($2::uuid[], $3::text[], $4::text[], $5::jsonb[])
                         AS n (id, type, key, properties)
                    RETURNING {OBJECT_COLUMNS}
                    """,
                    project_id,
                    [o.id for o in objects],
                    [o.type for o in objects],
                    [o.key for o in objects],
                    [o.properties for o in objects],
                )
        by_id = {row["id"]: GraphObject.from_row(row) for row in rows}
        return [by_id[o.id] for o in objects]

    async def get_object(self, project_id: str, object_id: str) -> GraphObject:
        """The object, or :class:`NotFound`."""
        row = await self._db.fetchrow(SELECT_OBJECT, project_id, parse_id(object_id))
        return GraphObject.from_row(found(row, f"object {object_id}"))

    async def exists(self, project_id: str, object_id: str) -> bool:
        """Whether the object is in the project (no row read: an id check of a reference)."""
        return bool(
            await self._db.fetchval(
                "SELECT EXISTS (SELECT 1 FROM kb.graph_objects WHERE project_id = $1 AND id = $2)",
                project_id,
                parse_id(object_id),
            )
        )

    async def get_objects(
        self, project_id: str, object_ids: Sequence[str], *, for_share: bool = False
    ) -> dict[str, GraphObject]:
        """The objects of ``object_ids`` that exist, by id (missing ones are absent).

        ``for_share`` locks them against deletion and updates until the transaction ends
        (callers that add edges to them in a transaction).
        """
        lock = "FOR SHARE" if for_share else ""
        rows = await self._db.fetch(
            f"""
            SELECT {OBJECT_COLUMNS} FROM kb.graph_objects
            WHERE project_id = $1 AND id = ANY($2::uuid[])
            ORDER BY id {lock}
            """,
            project_id,
            [parse_id(i) for i in object_ids],
        )
        return {str(row["id"]): GraphObject.from_row(row) for row in rows}

    async def update_object(
        self,
        project_id: str,
        object_id: str,
        *,
        set_properties: Mapping[str, Any],
        unset_properties: Sequence[str] = (),
        expected_version: int | None = None,
    ) -> GraphObject:
        """Merges ``set_properties`` into the properties, removes ``unset_properties``, and
        adds 1 to the version. With ``expected_version``, only if the object is still at that
        version: otherwise :class:`Aborted` naming the current one."""
        async with self._writer() as db:
            row = await db.fetchrow(
                f"""
                UPDATE kb.graph_objects
                SET properties = (properties || $3::jsonb) - $4::text[],
                    version = version + 1,
                    updated_at = now()
                WHERE project_id = $1 AND id = $2 AND ($5::int IS NULL OR version = $5)
                RETURNING {OBJECT_COLUMNS}
                """,
                project_id,
                parse_id(object_id),
                dict(set_properties),
                list(unset_properties),
                expected_version,
            )
        if row is None:
            await self._raise_missing_or_stale(project_id, object_id, expected_version)
        return GraphObject.from_row(row)

    async def delete_object(
        self, project_id: str, object_id: str, *, expected_version: int | None = None
    ) -> None:
        """Deletes the object and its relationships (cascade); conditional like updates."""
        deleted = await self._db.fetchval(
            """
            DELETE FROM kb.graph_objects
            WHERE project_id = $1 AND id = $2 AND ($3::int IS NULL OR version = $3)
            RETURNING id
            """,
            project_id,
            parse_id(object_id),
            expected_version,
        )
        if deleted is None:
            await self._raise_missing_or_stale(project_id, object_id, expected_version)

    async def _raise_missing_or_stale(
        self, project_id: str, object_id: str, expected_version: int | None
    ) -> None:
        """After a conditional write touched nothing: says whether the object is missing or
        at another version (one statement reading the current version)."""
        current = await self._db.fetchval(
            "SELECT version FROM kb.graph_objects WHERE project_id = $1 AND id = $2",
            project_id,
            parse_id(object_id),
        )
        if current is None:
            raise NotFound(f"object {object_id} not found")
        raise Aborted(
            f"object {object_id} was changed by someone else: expected version "
            f"{expected_version}, current version is {current}; read it again and retry"
        )

    async def list_objects(
        self,
        project_id: str,
        *,
        type: str | None = None,
        filters: Mapping[str, Any] | None = None,
        cursor: str | None = None,
        limit: int = 50,
    ) -> ObjectPage:
        """Objects oldest first, keyset-paginated on (created_at, id).

        ``filters`` are property equalities (``properties @> filters``). The cursor is
        opaque and only valid with the same type and filters.
        """
        limit = max(1, min(limit, MAX_PAGE_SIZE))
        token_filters = {"type": type, "filters": dict(filters or {})}
        after = _cursor_position(cursor or "", token_filters)
        # Fixed statement variants (no values in the SQL) so each keeps its index plan.
        where = ["project_id = $1", "properties @> $2::jsonb"]
        params: list[Any] = [project_id, dict(filters or {})]
        if type is not None:
            params.append(type)
            where.append(f"type = ${len(params)}")
        if after is not None:
            params += list(after)
            where.append(f"(created_at, id) > (${len(params) - 1}, ${len(params)})")
        params.append(limit + 1)
        rows = await self._db.fetch(
            f"""
            SELECT {OBJECT_COLUMNS} FROM kb.graph_objects
            WHERE {" AND ".join(where)}
            ORDER BY created_at, id
            LIMIT ${len(params)}
            """,
            *params,
        )
        objects = [GraphObject.from_row(row) for row in rows[:limit]]
        next_cursor = None
        if len(rows) > limit:
            last = rows[limit - 1]
            next_cursor = encode_page_token([last["created_at"], str(last["id"])], token_filters)
        return ObjectPage(objects=objects, next_cursor=next_cursor)


def _cursor_position(cursor: str, filters: Mapping[str, Any]) -> tuple[datetime, uuid.UUID] | None:
    """The (created_at, id) an object list resumes after; None for the first page."""
    position = decode_page_token(cursor, filters, kinds=(datetime, uuid.UUID), field="cursor")
    return None if position is None else (position[0], position[1])


async def _name_writer(
    conn: asyncpg.Connection, run_id: str | None, traceparent: str | None
) -> None:
    """Names the writing run and span to the graph trigger until the transaction ends (SET
    LOCAL): the runs the write triggers extend the run's chain and join the span's trace."""
    await conn.execute(
        "SELECT set_config('agentfleet.source_run_id', $1, true),"
        " set_config('agentfleet.traceparent', $2, true)",
        run_id or "",
        traceparent or "",
    )
