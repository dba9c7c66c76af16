"""Run trees (DESIGN §6): cancelling a run cancels every descendant, and a parent's
``tokens_total_tree`` is its own tokens plus its children's tree totals.

Cancellation goes through the ordinary per-run path (:meth:`RunQueue.request_cancel`):
a queued or paused descendant ends ``cancelled`` at once; a running one gets
``cancel_requested_at`` and a NOTIFY for whichever executor process holds it. The tree's
statements (the descendants, the tree tokens) are store :mod:`~services.executor.store.run_reads`'s.
"""

from __future__ import annotations

import asyncpg
import structlog

from services.executor.queue import RunQueue
from services.executor.runs import RunRecord
from services.executor.store import run_reads

log = structlog.get_logger(__name__)

ACTIVE = ("queued", "running", "waiting")
"""Statuses of descendants a finished parent leaves no one to wait for."""
NOT_ENDED = ("queued", "running", "waiting", "paused")


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
    ids = await run_reads.open_descendants(pool, project_id, run_id, statuses)
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
