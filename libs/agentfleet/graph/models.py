"""Values of the knowledge graph: rows become these dataclasses at the repository boundary."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import asyncpg

__all__ = [
    "Direction",
    "GraphObject",
    "ObjectPage",
    "Related",
    "Relationship",
    "ScoredObject",
    "Traversal",
    "TraversalNode",
]

Direction = Literal["out", "in", "both"]
"""Edges to follow from a node: outgoing (src is the node), incoming, or both."""


@dataclass(frozen=True, kw_only=True, slots=True)
class GraphObject:
    """A typed object of a project's knowledge graph."""

    id: str
    project_id: str
    type: str
    key: str | None
    """Natural key, unique per (project, type) when set."""
    properties: dict[str, Any]
    status: str | None
    """``properties.status``, denormalised by the database."""
    version: int
    """Starts at 1; every update adds 1 (optimistic concurrency)."""
    created_at: datetime
    updated_at: datetime

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> GraphObject:
        return cls(
            id=str(row["id"]),
            project_id=row["project_id"],
            type=row["type"],
            key=row["key"],
            properties=row["properties"],
            status=row["status"],
            version=row["version"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
        )

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable dict (ids as strings, timestamps ISO 8601)."""
        return {
            "id": self.id,
            "type": self.type,
            "key": self.key,
            "properties": self.properties,
            "version": self.version,
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class Relationship:
    """A typed directed edge ``src_id -> dst_id`` between two objects of one project."""

    id: str
    project_id: str
    type: str
    src_id: str
    dst_id: str
    properties: dict[str, Any]
    created_at: datetime

    @classmethod
    def from_row(cls, row: asyncpg.Record, prefix: str = "") -> Relationship:
        """From a row whose relationship columns may carry a ``prefix`` (joins)."""
        return cls(
            id=str(row[prefix + "id"]),
            project_id=row[prefix + "project_id"],
            type=row[prefix + "type"],
            src_id=str(row[prefix + "src_id"]),
            dst_id=str(row[prefix + "dst_id"]),
            properties=row[prefix + "properties"],
            created_at=row[prefix + "created_at"],
        )

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable dict (ids as strings, timestamps ISO 8601)."""
        return {
            "id": self.id,
            "type": self.type,
            "src_id": self.src_id,
            "dst_id": self.dst_id,
            "properties": self.properties,
            "created_at": self.created_at.isoformat(),
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class ObjectPage:
    """One page of :meth:`GraphRepository.list_objects`."""

    objects: list[GraphObject]
    next_cursor: str | None
    """Opaque cursor of the next page; ``None`` on the last page."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Related:
    """An object reached over one edge by :meth:`GraphRepository.get_related`."""

    relationship: Relationship
    object: GraphObject
    direction: Literal["out", "in"]
    """``out`` when the start object is the edge's source."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TraversalNode:
    object: GraphObject
    depth: int
    """Edges from the start node on the shortest path found (the start is 0)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Traversal:
    """Result of a bounded breadth-first traversal."""

    nodes: list[TraversalNode]
    """In visiting order: by depth, then by edge creation order."""
    edges: list[Relationship]
    """Edges followed between returned nodes."""
    truncated: bool
    """True when the node cap stopped the traversal before ``max_depth`` was exhausted."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ScoredObject:
    object: GraphObject
    score: float
    """ts_rank for full-text search; the reciprocal-rank-fusion score for hybrid search."""
    matched_by: tuple[str, ...] = field(default=())
    """Which rankings found it (``fts``, ``trigram``); hybrid search only."""
