"""Values of the knowledge graph: rows become these dataclasses at the repository boundary."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import asyncpg

from agentfleet.postgres.rows import from_row

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
        return from_row(cls, row, id=str(row["id"]))

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable dict (ids as strings, timestamps ISO 8601)."""
        return _json(self, "id", "type", "key", "properties", "version", "created_at", "updated_at")


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
        # Ids are UUIDs in the row and strings in the value.
        ids = {name: str(row[prefix + name]) for name in ("id", "src_id", "dst_id")}
        return from_row(cls, row, prefix, **ids)

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable dict (ids as strings, timestamps ISO 8601)."""
        return _json(self, "id", "type", "src_id", "dst_id", "properties", "created_at")


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


def _json(value: object, *names: str) -> dict[str, Any]:
    """The named fields of ``value`` as JSON values (timestamps as ISO 8601 strings)."""
    data: dict[str, Any] = {}
    for name in names:
        item = getattr(value, name)
        data[name] = item.isoformat() if isinstance(item, datetime) else item
    return data
