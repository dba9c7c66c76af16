"""Read-side graph queries: bounded breadth-first traversal, full-text and hybrid search.

A base class of :class:`agentfleet.graph.repository.GraphRepository`; same scoping rules:
every statement filters by ``project_id``.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Sequence

import asyncpg

from agentfleet.errors import InvalidArgument
from agentfleet.graph._common import (
    OBJECT_COLUMNS,
    SELECT_OBJECT,
    Executor,
    edge_select,
    found,
    parse_id,
)
from agentfleet.graph.models import (
    Direction,
    GraphObject,
    Relationship,
    ScoredObject,
    Traversal,
    TraversalNode,
)

__all__ = ["MAX_TRAVERSAL_DEPTH", "MAX_TRAVERSAL_NODES", "RRF_K", "GraphReads"]

MAX_TRAVERSAL_DEPTH = 5
MAX_TRAVERSAL_NODES = 200
# Rows one traversal level may read: a hub with more edges than this marks the result
# truncated instead of reading them all.
MAX_EDGES_PER_LEVEL = 2000
RRF_K = 60
"""Reciprocal rank fusion constant: score = sum over rankings of 1 / (RRF_K + rank)."""
HYBRID_CANDIDATES = 50
"""How deep each ranking of hybrid search goes before fusion."""
WORD_SIMILARITY_THRESHOLD = "0.3"
"""pg_trgm word similarity a trigram candidate needs; low, since fusion ranks afterwards."""


def _level_select(direction: str) -> str:
    """The edges of one direction from a traversal level's frontier (``$2``)."""
    return edge_select(
        direction,
        near="= ANY($2::uuid[])",
        types="($3::text[] IS NULL OR r.type = ANY($3::text[]))",
    )


_FTS_MATCHES = """FROM kb.graph_objects, websearch_to_tsquery('simple', $2) AS q
    WHERE project_id = $1 AND search @@ q AND ($3::text IS NULL OR type = $3)"""
"""The objects full-text search finds (``$1`` project, ``$2`` query, ``$3`` type or NULL)."""

_LEVEL = {
    direction: f"SELECT * FROM ({body}) level ORDER BY r_created_at, r_id LIMIT $4"
    for direction, body in {
        "out": _level_select("out"),
        "in": _level_select("in"),
        "both": f"{_level_select('out')} UNION ALL {_level_select('in')}",
    }.items()
}


class GraphReads:
    """Traversal and search over ``self._db`` (set by the repository's constructor)."""

    _db: Executor

    @contextlib.asynccontextmanager
    async def _snapshot(self) -> AsyncIterator[asyncpg.Connection]:
        """One connection seeing one snapshot, so a multi-statement read is consistent."""
        if isinstance(self._db, asyncpg.Connection):
            yield self._db
            return
        async with (
            self._db.acquire() as conn,
            conn.transaction(isolation="repeatable_read", readonly=True),
        ):
            yield conn

    async def traverse(
        self,
        project_id: str,
        start_id: str,
        *,
        relationship_types: Sequence[str] | None = None,
        direction: Direction = "out",
        max_depth: int = 2,
        max_nodes: int = 50,
    ) -> Traversal:
        """Breadth-first traversal from ``start_id`` (depth 0), one statement per level.

        Follows edges of ``relationship_types`` (all types when ``None``) up to
        ``max_depth`` (1..5) edges away and stops adding nodes at ``max_nodes``
        (1..200, the start included); ``truncated`` says nodes were left out.
        :class:`NotFound` if the start is not in the project.
        """
        if not 1 <= max_depth <= MAX_TRAVERSAL_DEPTH:
            raise InvalidArgument.for_field(
                "max_depth", f"must be between 1 and {MAX_TRAVERSAL_DEPTH}"
            )
        if not 1 <= max_nodes <= MAX_TRAVERSAL_NODES:
            raise InvalidArgument.for_field(
                "max_nodes", f"must be between 1 and {MAX_TRAVERSAL_NODES}"
            )
        types = list(relationship_types) if relationship_types else None
        start = parse_id(start_id, "start_id")
        async with self._snapshot() as conn:
            row = found(await conn.fetchrow(SELECT_OBJECT, project_id, start), f"object {start_id}")
            nodes = [TraversalNode(object=GraphObject.from_row(row), depth=0)]
            visited: set[uuid.UUID] = {start}
            edges: dict[str, Relationship] = {}
            frontier = [start]
            truncated = False
            for depth in range(1, max_depth + 1):
                if not frontier:
                    break
                rows = await conn.fetch(
                    _LEVEL[direction], project_id, frontier, types, MAX_EDGES_PER_LEVEL + 1
                )
                if len(rows) > MAX_EDGES_PER_LEVEL:
                    truncated = True
                    rows = rows[:MAX_EDGES_PER_LEVEL]
                frontier = []
                for level_row in rows:
                    far: uuid.UUID = level_row["far_id"]
                    if far not in visited:
                        if len(nodes) >= max_nodes:
                            truncated = True
                            continue
                        visited.add(far)
                        frontier.append(far)
                        nodes.append(
                            TraversalNode(object=GraphObject.from_row(level_row), depth=depth)
                        )
                    edge = Relationship.from_row(level_row, "r_")
                    edges[edge.id] = edge
        return Traversal(nodes=nodes, edges=list(edges.values()), truncated=truncated)

    async def search_fts(
        self, project_id: str, query: str, *, type: str | None = None, limit: int = 20
    ) -> list[ScoredObject]:
        """Full-text search (``websearch_to_tsquery`` syntax: words, "phrases", or, -not)
        on titles, names, summaries, descriptions and content, best ``ts_rank`` first."""
        rows = await self._db.fetch(
            f"""
            SELECT {OBJECT_COLUMNS}, ts_rank(search, q) AS score
            {_FTS_MATCHES}
            ORDER BY score DESC, created_at, id
            LIMIT $4
            """,
            *_search_args(project_id, query, type, limit),
        )
        return [ScoredObject(object=GraphObject.from_row(r), score=r["score"]) for r in rows]

    async def search_hybrid(
        self, project_id: str, query: str, *, type: str | None = None, limit: int = 20
    ) -> list[ScoredObject]:
        """Full-text ranking and trigram word-similarity ranking (typo tolerant, on titles,
        names and descriptions) fused by reciprocal rank (k = 60): an object both find
        ranks above one only either finds, and a misspelt word still finds its object."""
        async with self._snapshot() as conn, _in_transaction(conn):
            # Scoped to this transaction: the `<%` operator reads the threshold from here.
            await conn.execute(
                "SELECT set_config('pg_trgm.word_similarity_threshold', $1, true)",
                WORD_SIMILARITY_THRESHOLD,
            )
            rows = await conn.fetch(
                f"""
                WITH fts AS (
                    SELECT id, row_number() OVER (
                               ORDER BY ts_rank(search, q) DESC, created_at, id) AS rank
                    {_FTS_MATCHES}
                    ORDER BY rank LIMIT $5
                ), trigram AS (
                    SELECT id, row_number() OVER (
                               ORDER BY word_similarity($2, search_text) DESC, created_at, id)
                               AS rank
                    FROM kb.graph_objects
                    WHERE project_id = $1 AND $2 <% search_text AND ($3::text IS NULL OR type = $3)
                    ORDER BY rank LIMIT $5
                ), fused AS (
                    SELECT id, sum(1.0 / ($6 + rank))::float8 AS score,
                           array_agg(source ORDER BY source) AS matched_by
                    FROM (SELECT id, rank, 'fts' AS source FROM fts
                          UNION ALL SELECT id, rank, 'trigram' FROM trigram) ranked
                    GROUP BY id
                )
                SELECT {", ".join("o." + c for c in OBJECT_COLUMNS.split(", "))},
                       f.score, f.matched_by
                FROM fused f JOIN kb.graph_objects o ON o.project_id = $1 AND o.id = f.id
                ORDER BY f.score DESC, o.created_at, o.id
                LIMIT $4
                """,
                *_search_args(project_id, query, type, limit),
                HYBRID_CANDIDATES,
                RRF_K,
            )
        return [
            ScoredObject(
                object=GraphObject.from_row(r), score=r["score"], matched_by=tuple(r["matched_by"])
            )
            for r in rows
        ]


def _search_args(
    project_id: str, query: str, type: str | None, limit: int
) -> tuple[str, str, str | None, int]:
    """``$1`` .. ``$4`` of both searches: project, query, type or NULL, page size (1..100)."""
    return project_id, query, type, max(1, min(limit, 100))


@contextlib.asynccontextmanager
async def _in_transaction(conn: asyncpg.Connection) -> AsyncIterator[None]:
    """A (nested, if need be) transaction, so a ``set_config(..., true)`` ends with it."""
    async with conn.transaction():
        yield
