"""The history prune's statements (DESIGN, Retention): which finished run trees of one
project are past its retention, and their deletion in one short statement per batch.

A top-level run's tree is prunable when the root finished (completed, failed or cancelled;
never paused, which ResumeRun may continue) before the cutoff, and no run of the tree:
- has not finished or finished after the cutoff;
- belongs to a task (task_id is cleared when the task object is deleted: until then the
  dispatcher may read the run);
- has a thread with a run not finished before the cutoff (the thread's next turn reads
  its earlier turns: a thread goes whole, once all of it is old);
- holds a tool call awaiting approval.

Each batch reads at most ``scan`` roots of agent_runs_prune_idx after a keyset position, so
a project whose oldest runs are all kept does not make every batch walk them again; the
roots it deletes are locked SKIP LOCKED (two pruners take disjoint trees) and their rows go
by the foreign keys' cascade, in the statement's own short transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import asyncpg

TERMINAL = "('completed', 'failed', 'cancelled')"

_SCANNED = f"""
scanned AS MATERIALIZED (
    SELECT r.id, r.completed_at FROM kb.agent_runs r
    WHERE r.project_id = $1 AND r.depth = 0 AND r.completed_at IS NOT NULL
      AND r.completed_at < $2 AND (r.completed_at, r.id) > ($3, $4::uuid)
    ORDER BY r.completed_at, r.id
    LIMIT $5
), victims AS MATERIALIZED (
    SELECT r.id FROM scanned s JOIN kb.agent_runs r ON r.id = s.id
    WHERE r.project_id = $1 AND r.status IN {TERMINAL}
      AND NOT EXISTS (
          SELECT 1 FROM kb.agent_runs t
          WHERE t.project_id = $1 AND t.root_run_id = r.id
            AND (t.status NOT IN {TERMINAL} OR t.completed_at IS NULL OR t.completed_at >= $2
                 OR t.task_id IS NOT NULL
                 OR (t.thread_id IS NOT NULL AND EXISTS (
                     SELECT 1 FROM kb.agent_runs h
                     WHERE h.project_id = $1 AND h.thread_id = t.thread_id
                       AND (h.status NOT IN {TERMINAL} OR h.completed_at IS NULL
                            OR h.completed_at >= $2)))
                 OR EXISTS (
                     SELECT 1 FROM kb.agent_run_tool_calls c
                     WHERE c.run_id = t.id AND c.status = 'awaiting_approval')))
    {{lock}}
), tree AS MATERIALIZED (
    SELECT t.id FROM kb.agent_runs t
    WHERE t.project_id = $1 AND t.root_run_id IN (SELECT id FROM victims)
)"""

_COUNTS = """
SELECT (SELECT count(*) FROM victims) AS roots,
       (SELECT count(*) FROM tree) AS runs,
       (SELECT count(*) FROM kb.agent_run_messages m WHERE m.run_id IN (SELECT id FROM tree))
           AS messages,
       (SELECT count(*) FROM kb.agent_run_tool_calls c WHERE c.run_id IN (SELECT id FROM tree))
           AS tool_calls,
       (SELECT count(*) FROM kb.agent_run_events e WHERE e.run_id IN (SELECT id FROM tree))
           AS events,
       (SELECT count(*) FROM scanned) AS scanned,
       (SELECT s.completed_at FROM scanned s ORDER BY s.completed_at DESC, s.id DESC LIMIT 1)
           AS last_completed_at,
       (SELECT s.id FROM scanned s ORDER BY s.completed_at DESC, s.id DESC LIMIT 1) AS last_id
"""

# The counts read the statement's snapshot, taken before the DELETE: what the cascade removes.
PRUNE_BATCH = f"""
WITH {_SCANNED.replace("{lock}", "FOR UPDATE OF r SKIP LOCKED")},
deleted AS (
    DELETE FROM kb.agent_runs d
    WHERE d.project_id = $1 AND d.id IN (SELECT id FROM victims)
    RETURNING d.id
)
{_COUNTS}, (SELECT count(*) FROM deleted) AS deleted_roots
"""

COUNT_BATCH = f"WITH {_SCANNED.replace('{lock}', '')}\n{_COUNTS}"

KEEP_DAYS = """
SELECT coalesce((SELECT keep_days FROM kb.project_retention WHERE project_id = $1), $2::integer)
"""

SET_KEEP_DAYS = """
INSERT INTO kb.project_retention (project_id, keep_days) VALUES ($1, $2)
ON CONFLICT (project_id) DO UPDATE SET keep_days = excluded.keep_days, updated_at = now()
"""

CLEAR_KEEP_DAYS = "DELETE FROM kb.project_retention WHERE project_id = $1"

CUTOFF = "SELECT now() - make_interval(days => $1::integer)"

# Projects with finished top-level runs: a loose index scan of agent_runs_prune_idx, one
# probe per project (projects are made by the operator).
PROJECTS = """
WITH RECURSIVE projects AS (
    (SELECT project_id FROM kb.agent_runs
     WHERE depth = 0 AND completed_at IS NOT NULL ORDER BY project_id LIMIT 1)
    UNION ALL
    SELECT (SELECT r.project_id FROM kb.agent_runs r
            WHERE r.depth = 0 AND r.completed_at IS NOT NULL AND r.project_id > p.project_id
            ORDER BY r.project_id LIMIT 1)
    FROM projects p WHERE p.project_id IS NOT NULL
)
SELECT project_id FROM projects WHERE project_id IS NOT NULL
"""

NIL_UUID = "00000000-0000-0000-0000-000000000000"


@dataclass(frozen=True, kw_only=True, slots=True)
class BatchResult:
    """What one batch deleted (or would), and where the next one starts."""

    roots: int
    runs: int
    messages: int
    tool_calls: int
    events: int
    scanned: int
    """Roots of the index range read; fewer than asked: the range is done."""
    last: tuple[datetime, str] | None
    """Keyset position of the last root read; None when none was."""


async def batch(
    conn: asyncpg.Connection | asyncpg.Pool,
    project_id: str,
    cutoff: datetime,
    after: tuple[datetime, str] | None,
    scan: int,
    *,
    dry_run: bool,
) -> BatchResult:
    """One batch: :data:`PRUNE_BATCH` (or :data:`COUNT_BATCH` with ``dry_run``)."""
    after_at, after_id = after or (datetime.min.replace(tzinfo=cutoff.tzinfo), NIL_UUID)
    row = await conn.fetchrow(
        COUNT_BATCH if dry_run else PRUNE_BATCH, project_id, cutoff, after_at, after_id, scan
    )
    assert row is not None  # an aggregate row is always returned
    last = row["last_completed_at"]
    return BatchResult(
        roots=row["roots"],
        runs=row["runs"],
        messages=row["messages"],
        tool_calls=row["tool_calls"],
        events=row["events"],
        scanned=row["scanned"],
        last=None if last is None else (last, str(row["last_id"])),
    )
