"""Run trees (DESIGN §6): cancelling a run cancels every descendant, and a parent's
``tokens_total_tree`` is its own tokens plus its children's tree totals.

Cancellation goes through the ordinary per-run path (:meth:`RunQueue.request_cancel`):
a queued or paused descendant ends ``cancelled`` at once; a running one gets
``cancel_requested_at`` and a NOTIFY for whichever executor process holds it.
"""

from __future__ import annotations

import asyncpg
import structlog

from services.executor.queue import RunQueue
from services.executor.runs import RunRecord

log = structlog.get_logger(__name__)

# Descendants of a run that have not ended, parents before children. Walks
# agent_runs_parent_created_idx one level at a time; project-scoped at every level. Runs of
# tasks the run created (task_id set, see task_lineage) are its children only for their
# limits: the dispatcher owns them (CancelTaskGraph), so they are not cancelled with it.
_OPEN_DESCENDANTS = """
WITH RECURSIVE tree AS (
    SELECT id, status, 1 AS level FROM kb.agent_runs
    WHERE project_id = $1 AND parent_run_id = $2::uuid AND task_id IS NULL
    UNION ALL
    SELECT r.id, r.status, t.level + 1 FROM kb.agent_runs r
    JOIN tree t ON r.parent_run_id = t.id
    WHERE r.project_id = $1 AND r.task_id IS NULL
)
SELECT id FROM tree WHERE status = ANY($3::text[]) ORDER BY level, id
"""

_TREE_TOKENS = """
UPDATE kb.agent_runs p
SET tokens_total_tree = p.tokens_in + p.tokens_out + coalesce(
    (SELECT sum(c.tokens_total_tree) FROM kb.agent_runs c
     WHERE c.parent_run_id = p.id AND c.project_id = $1), 0)
WHERE p.project_id = $1 AND p.id = $2::uuid
RETURNING p.tokens_total_tree
"""

ACTIVE = ("queued", "running", "waiting")
"""Statuses of descendants a finished parent leaves no one to wait for."""
NOT_ENDED = ("queued", "running", "waiting", "paused")


async def open_descendants(
    pool: asyncpg.Pool, project_id: str, run_id: str, statuses: tuple[str, ...] = NOT_ENDED
) -> list[str]:
    """Ids of the run's descendants in ``statuses``, parents first."""
    rows = await pool.fetch(_OPEN_DESCENDANTS, project_id, run_id, list(statuses))
    return [str(r["id"]) for r in rows]


async def cancel_descendants(
    queue: RunQueue,
    pool: asyncpg.Pool,
    project_id: str,
    run_id: str,
    reason: str,
    *,
    statuses: tuple[str, ...] = NOT_ENDED,
) -> list[str]:
    """Requests the cancellation of every descendant in ``statuses``; their ids."""
    ids = await open_descendants(pool, project_id, run_id, statuses)
    for child_id in ids:
        await queue.request_cancel(project_id, child_id, reason)
    if ids:
        log.info("descendants_cancelled", run_id=run_id, count=len(ids))
    return ids


async def cancel_tree(
    queue: RunQueue, pool: asyncpg.Pool, project_id: str, run_id: str, reason: str
) -> RunRecord:
    """CancelRun of a whole tree: the run itself, then all its descendants that have not
    ended; returns the run as :meth:`RunQueue.request_cancel` does."""
    run = await queue.request_cancel(project_id, run_id, reason)
    await cancel_descendants(queue, pool, project_id, run_id, f"ancestor cancelled: {reason}")
    return run


async def refresh_tree_tokens(
    conn: asyncpg.Connection | asyncpg.Pool, project_id: str, run_id: str
) -> int:
    """Recomputes the run's tokens_total_tree from its own tokens and its children's tree
    totals (idempotent, so a re-attached or resumed child is never counted twice)."""
    total = await conn.fetchval(_TREE_TOKENS, project_id, run_id)
    return int(total or 0)
