"""Planner statistics of the graph tables, refreshed after a large task graph is written.

The dispatcher's statements find each task by its primary key. With no statistics (a fresh
database) or statistics from when the tables were a fraction of their size, PostgreSQL
believes every index empty and may serve "the dependent with this id" from the project's
SpecTask index instead, reading every task of the project per dependent: the cost per task
then grows with the graph (issue 8: 4 ms per settle at 2,500 tasks, 55 ms at 10,000).
Autovacuum would analyze the tables eventually, but only after a naptime and a share of
changed rows that a freshly created graph dispatches through well before.
"""

from __future__ import annotations

import asyncpg
import structlog

__all__ = ["ANALYZE_MIN_ROWS", "STALE_SHARE", "refresh_after_write"]

log = structlog.get_logger(__name__)

ANALYZE_MIN_ROWS = 500
"""Smaller writes never analyze: a planner mistake then costs a few hundred rows at most."""
STALE_SHARE = 0.1
"""Analyze when the write adds more than this share of the rows the statistics know
(autovacuum's own default ``autovacuum_analyze_scale_factor``)."""

_KNOWN_ROWS = """
    SELECT coalesce(min(reltuples), -1) FROM pg_class
    WHERE oid IN ('kb.graph_objects'::regclass, 'kb.graph_relationships'::regclass)
    """


def needs_analyze(added_rows: int, known_rows: float) -> bool:
    """Whether ``added_rows`` new rows make statistics that know ``known_rows`` rows stale
    (``known_rows`` < 0: never analyzed)."""
    if added_rows < ANALYZE_MIN_ROWS:
        return False
    return known_rows < 0 or added_rows > STALE_SHARE * known_rows


async def refresh_after_write(pool: asyncpg.Pool, added_rows: int) -> bool:
    """ANALYZEs the graph tables when a committed write of ``added_rows`` objects outgrew
    their statistics; True when it did. A failure (a role that may not analyze, a
    database blip) is logged and ignored: statistics only make plans better."""
    if added_rows < ANALYZE_MIN_ROWS:
        return False
    try:
        async with pool.acquire() as conn:
            known = float(await conn.fetchval(_KNOWN_ROWS))
            if not needs_analyze(added_rows, known):
                return False
            # Samples a bounded number of rows (300 x the statistics target) per table.
            await conn.execute("ANALYZE kb.graph_objects, kb.graph_relationships")
    except (asyncpg.PostgresError, OSError) as exc:
        log.warning("could not refresh graph statistics", error=str(exc))
        return False
    return True
