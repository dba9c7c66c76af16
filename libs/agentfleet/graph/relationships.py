"""Relationships of the knowledge graph: typed directed edges between objects of a project.

A base class of :class:`agentfleet.graph.repository.GraphRepository`; same scoping rules.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from agentfleet.errors import NotFound
from agentfleet.graph._common import (
    RELATIONSHIP_COLUMNS,
    Executor,
    edge_select,
    found,
    parse_id,
    translated,
)
from agentfleet.graph.models import Direction, GraphObject, Related, Relationship

__all__ = ["GraphRelationships"]


class GraphRelationships:
    """Relationship statements over ``self._db`` (set by the repository's constructor)."""

    _db: Executor

    async def create_relationship(
        self,
        project_id: str,
        *,
        type: str,
        src_id: str,
        dst_id: str,
        properties: Mapping[str, Any] | None = None,
    ) -> tuple[Relationship, bool]:
        """Creates ``src -[type]-> dst`` unless it exists; returns it and whether it is new.

        Both ends must be objects of the project (:class:`NotFound` naming the missing end).
        """
        src, dst = parse_id(src_id, "src_id"), parse_id(dst_id, "dst_id")
        with translated("relationship"):
            row = await self._db.fetchrow(
                f"""
                WITH ends AS (
                    SELECT bool_or(id = $3) AS src_ok, bool_or(id = $4) AS dst_ok
                    FROM kb.graph_objects
                    WHERE project_id = $1 AND id = ANY(ARRAY[$3, $4]::uuid[])
                ), inserted AS (
                    INSERT INTO kb.graph_relationships
                        (project_id, type, src_id, dst_id, properties)
                    SELECT $1, $2, $3, $4, $5::jsonb FROM ends WHERE src_ok AND dst_ok
                    ON CONFLICT (project_id, src_id, type, dst_id) DO NOTHING
                    RETURNING {RELATIONSHIP_COLUMNS}
                ), existing AS (
                    SELECT {RELATIONSHIP_COLUMNS} FROM kb.graph_relationships
                    WHERE project_id = $1 AND src_id = $3 AND type = $2 AND dst_id = $4
                )
                SELECT coalesce(e.src_ok, false) AS src_ok, coalesce(e.dst_ok, false) AS dst_ok,
                       i.id IS NOT NULL AS created, r.*
                FROM ends e
                LEFT JOIN inserted i ON true
                LEFT JOIN LATERAL (
                    SELECT * FROM inserted UNION ALL SELECT * FROM existing LIMIT 1
                ) r ON true
                """,
                project_id,
                type,
                src,
                dst,
                dict(properties or {}),
            )
        if not row["src_ok"]:
            raise NotFound(f"src_id: object {src_id} not found")
        if not row["dst_ok"]:
            raise NotFound(f"dst_id: object {dst_id} not found")
        if row["id"] is None:
            # A concurrent transaction inserted the same edge after this statement's
            # snapshot was taken: ON CONFLICT waited for it, so it is committed now.
            existing = await self._db.fetchrow(
                f"""
                SELECT {RELATIONSHIP_COLUMNS} FROM kb.graph_relationships
                WHERE project_id = $1 AND src_id = $2 AND type = $3 AND dst_id = $4
                """,
                project_id,
                src,
                type,
                dst,
            )
            if existing is None:
                raise NotFound(f"relationship {type} from {src_id} to {dst_id} vanished")
            return Relationship.from_row(existing), False
        return Relationship.from_row(row), bool(row["created"])

    async def create_relationships(
        self, project_id: str, edges: Sequence[tuple[str, uuid.UUID | str, uuid.UUID | str]]
    ) -> list[Relationship]:
        """Creates ``(type, src_id, dst_id)`` edges in one statement, skipping existing ones.

        Edges whose ends are not both objects of the project are not written; the caller
        checks ends first (usually with ``get_objects(..., for_share=True)``) and compares.
        """
        with translated("relationship"):
            rows = await self._db.fetch(
                f"""
                INSERT INTO kb.graph_relationships (project_id, type, src_id, dst_id)
                SELECT $1, e.type, e.src_id, e.dst_id
                FROM unnest($2::text[], $3::uuid[], $4::uuid[]) AS e (type, src_id, dst_id)
                JOIN kb.graph_objects s ON s.project_id = $1 AND s.id = e.src_id
                JOIN kb.graph_objects d ON d.project_id = $1 AND d.id = e.dst_id
                ON CONFLICT (project_id, src_id, type, dst_id) DO NOTHING
                RETURNING {RELATIONSHIP_COLUMNS}
                """,
                project_id,
                [t for t, _, _ in edges],
                [parse_id(s, "src_id") for _, s, _ in edges],
                [parse_id(d, "dst_id") for _, _, d in edges],
            )
        return [Relationship.from_row(row) for row in rows]

    async def get_relationship(self, project_id: str, relationship_id: str) -> Relationship:
        """One relationship by id; :class:`NotFound` if the project has none with it."""
        row = await self._db.fetchrow(
            f"SELECT {RELATIONSHIP_COLUMNS} FROM kb.graph_relationships "
            "WHERE project_id = $1 AND id = $2",
            project_id,
            parse_id(relationship_id),
        )
        return Relationship.from_row(found(row, f"relationship {relationship_id}"))

    async def delete_relationship(self, project_id: str, relationship_id: str) -> Relationship:
        """Deletes one relationship by id; :class:`NotFound` if there is none."""
        row = await self._db.fetchrow(
            f"""
            DELETE FROM kb.graph_relationships WHERE project_id = $1 AND id = $2
            RETURNING {RELATIONSHIP_COLUMNS}
            """,
            project_id,
            parse_id(relationship_id),
        )
        return Relationship.from_row(found(row, f"relationship {relationship_id}"))

    async def delete_relationship_between(
        self, project_id: str, *, type: str, src_id: str, dst_id: str
    ) -> Relationship:
        """Deletes ``src -[type]-> dst``; :class:`NotFound` if there is none."""
        row = await self._db.fetchrow(
            f"""
            DELETE FROM kb.graph_relationships
            WHERE project_id = $1 AND src_id = $2 AND type = $3 AND dst_id = $4
            RETURNING {RELATIONSHIP_COLUMNS}
            """,
            project_id,
            parse_id(src_id, "src_id"),
            type,
            parse_id(dst_id, "dst_id"),
        )
        return Relationship.from_row(found(row, f"relationship {type} from {src_id} to {dst_id}"))

    async def get_related(
        self,
        project_id: str,
        object_id: str,
        *,
        type: str | None = None,
        direction: Direction = "out",
        limit: int = 100,
    ) -> list[Related]:
        """Objects one edge away (oldest edge first); :class:`NotFound` if the start object
        is not in the project. ``type`` restricts the relationship type."""
        rows = await self._db.fetch(
            f"""
            WITH start AS (SELECT id FROM kb.graph_objects WHERE project_id = $1 AND id = $2)
            SELECT s.id AS start_id, n.*
            FROM start s
            LEFT JOIN LATERAL (
                {_NEIGHBOURS[direction]}
                ORDER BY r_created_at, r_id
                LIMIT $4
            ) n ON true
            """,
            project_id,
            parse_id(object_id),
            type,
            max(1, min(limit, 1000)),
        )
        if not rows:
            raise NotFound(f"object {object_id} not found")
        return [
            Related(
                relationship=Relationship.from_row(row, "r_"),
                object=GraphObject.from_row(row),
                direction=row["dir"],
            )
            for row in rows
            if row["r_id"] is not None
        ]


def _neighbour_select(direction: str) -> str:
    """The edges of one direction from the start object ``s`` of :meth:`get_related`."""
    return edge_select(direction, near="= s.id", types="($3::text IS NULL OR r.type = $3)")


_NEIGHBOURS = {
    "out": _neighbour_select("out"),
    "in": _neighbour_select("in"),
    "both": f"{_neighbour_select('out')} UNION ALL {_neighbour_select('in')}",
}
