"""The triggers' share of the history prune (DESIGN, Retention): trigger firings and consumed
outbox events, deleted in small batches by :class:`~services.history.retention.HistoryRetention`
(the same background job, interval and replicas as the run trees).

- A project's firings (``kb.trigger_firings``, ListTriggerFirings) are its history: they go
  with its retention (``kb.project_retention`` or AGENTFLEET_HISTORY_RETENTION_DAYS), once
  recorded before the cutoff. The per-minute cap counts the last 60 s only, and a retention
  is at least a day, so no cap ever reads a pruned firing.
- Consumed outbox events (``kb.trigger_outbox``) are the consumers' bookkeeping, kept
  AGENTFLEET_TRIGGER_OUTBOX_RETENTION_HOURS after their consumption, whatever the project's
  retention: an event is never claimed again once consumed (its ``consumed_at`` says so, and
  its runs' request ids name its id, which the identity never hands out twice), so the only
  reader of an old row is EmitEvent's ``request_id`` check, idempotent for that long. An
  unconsumed event is never deleted.

Each statement deletes at most :data:`BATCH_ROWS` rows (by primary key: ``id = ANY (ARRAY
(...))``, which a join to the batch would let the planner turn into a scan of the table), in
its own short transaction on the pool, locking them ``SKIP LOCKED`` (two history replicas
take disjoint rows, and a consumer holding a row is never waited for); a call stops at its
row budget and says so.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime

import asyncpg

BATCH_ROWS = 1000
"""Rows one statement deletes at most."""
PASS_ROWS = 100_000
"""Rows one call deletes at most: a project's firings, or the outbox of a pass."""

# Oldest first along trigger_firings_project_created_idx (project_id, created_at DESC, id DESC).
PRUNE_FIRINGS = """
WITH victims AS (
    SELECT id FROM kb.trigger_firings
    WHERE project_id = $1 AND created_at < $2
    ORDER BY created_at, id
    LIMIT $3
    FOR UPDATE SKIP LOCKED
)
DELETE FROM kb.trigger_firings
WHERE project_id = $1 AND id = ANY (ARRAY (SELECT id FROM victims))
"""

COUNT_FIRINGS = """
SELECT count(*) FROM (
    SELECT 1 FROM kb.trigger_firings WHERE project_id = $1 AND created_at < $2 LIMIT $3
) old
"""

# Along trigger_outbox_consumed_idx (migration 0032): consumed rows only, oldest first.
PRUNE_OUTBOX = """
WITH victims AS (
    SELECT id FROM kb.trigger_outbox
    WHERE consumed_at IS NOT NULL AND consumed_at < now() - make_interval(hours => $1::integer)
    ORDER BY consumed_at, id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
DELETE FROM kb.trigger_outbox
WHERE id = ANY (ARRAY (SELECT id FROM victims)) AND consumed_at IS NOT NULL
RETURNING project_id
"""

# Projects with firings: a loose index scan of trigger_firings_project_created_idx.
FIRING_PROJECTS = """
WITH RECURSIVE projects AS (
    (SELECT project_id FROM kb.trigger_firings ORDER BY project_id LIMIT 1)
    UNION ALL
    SELECT (SELECT f.project_id FROM kb.trigger_firings f
            WHERE f.project_id > p.project_id ORDER BY f.project_id LIMIT 1)
    FROM projects p WHERE p.project_id IS NOT NULL
)
SELECT project_id FROM projects WHERE project_id IS NOT NULL
"""


@dataclass(frozen=True, kw_only=True, slots=True)
class Pruned:
    """Rows a call deleted (or, dry, would), and whether its budget stopped it."""

    rows: int
    more: bool


async def prune_firings(
    pool: asyncpg.Pool,
    project_id: str,
    cutoff: datetime,
    *,
    dry_run: bool,
    max_rows: int = PASS_ROWS,
    batch_rows: int = BATCH_ROWS,
) -> Pruned:
    """Deletes (counts) the project's firings recorded before ``cutoff``, at most
    ``max_rows``; every statement is scoped by ``project_id``."""
    if dry_run:
        counted = int(await pool.fetchval(COUNT_FIRINGS, project_id, cutoff, max_rows + 1))
        return Pruned(rows=min(counted, max_rows), more=counted > max_rows)
    deleted = 0
    while deleted < max_rows:
        batch = min(batch_rows, max_rows - deleted)
        rows = _deleted(await pool.execute(PRUNE_FIRINGS, project_id, cutoff, batch))
        deleted += rows
        if rows < batch:
            return Pruned(rows=deleted, more=False)
    return Pruned(rows=deleted, more=True)


async def prune_outbox(
    pool: asyncpg.Pool,
    keep_hours: int,
    *,
    max_rows: int = PASS_ROWS,
    batch_rows: int = BATCH_ROWS,
) -> tuple[Counter[str], bool]:
    """Deletes outbox events consumed more than ``keep_hours`` ago, at most ``max_rows``:
    the rows deleted per project, and whether the budget stopped it."""
    per_project: Counter[str] = Counter()
    deleted = 0
    while deleted < max_rows:
        batch = min(batch_rows, max_rows - deleted)
        rows = await pool.fetch(PRUNE_OUTBOX, keep_hours, batch)
        per_project.update(row["project_id"] for row in rows)
        deleted += len(rows)
        if len(rows) < batch:
            return per_project, False
    return per_project, True


def _deleted(status: str) -> int:
    """The row count of a ``DELETE n`` command status."""
    return int(status.rsplit(" ", 1)[-1])
