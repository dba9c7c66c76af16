"""Readying dependents that a completion left waiting (issue 8): ``unblock``, the re-check run
right after a completing commit, and ``sweep``, the bounded backstop walk over pending tasks
for what that re-check could not catch (a dispatcher that died between the two, a completion
made by another writer). The completing statements themselves are in ``transitions``."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import asyncpg

from agentfleet.graph import BLOCKS, SPEC_TASK
from services.dispatcher.store.common import READY_CHANNEL, UNFINISHED_BLOCKER

__all__ = ["SWEEP_PAGE", "SweepCursor", "sweep", "unblock"]

SWEEP_PAGE = 200
"""Pending tasks looked at per ``sweep`` page (the dispatcher walks a page per poll tick)."""

# The re-check of ``unblock``: the dependents of the given completed tasks that are pending,
# not yet marked ready and have no unfinished blocker in this statement's (fresh) snapshot.
# Both lookups are array probes of unique indexes: as joins against the unnest the planner,
# guessing sizes, chose a scan of the relationships and of the project's tasks (25 ms per
# call on a 4,000-task graph). Edges join objects of one project; ids are unique, and the
# project check on t is written ``IS TRUE`` so it stays a filter, not a project-wide scan.
_UNBLOCK = f"""
    WITH deps AS MATERIALIZED (
        SELECT DISTINCT r.project_id, r.dst_id
        FROM kb.graph_relationships r
        JOIN unnest($1::text[], $2::uuid[]) AS c (project_id, task_id)
          ON r.project_id = c.project_id AND r.src_id = c.task_id
        WHERE r.project_id = ANY($1::text[]) AND r.src_id = ANY($2::uuid[])
          AND r.type = '{BLOCKS}'
    ), ready AS (
        UPDATE kb.graph_objects t
        SET properties = t.properties || '{{"ready": true}}',
            version = t.version + 1, updated_at = now()
        WHERE t.id = ANY (ARRAY(SELECT dst_id FROM deps))
          AND (t.project_id = ANY($1::text[])) IS TRUE
          AND t.type = '{SPEC_TASK}' AND t.status = 'pending'
          AND (t.properties ->> 'ready') IS DISTINCT FROM 'true'
          AND NOT {UNFINISHED_BLOCKER}
        RETURNING t.project_id
    )
    SELECT count(*) AS n,
           (SELECT count(pg_notify('{READY_CHANNEL}', p))
            FROM (SELECT DISTINCT project_id FROM ready) AS y (p)) AS notified
    FROM ready
    """


# The backstop of ``sweep``: one page of pending tasks in the order of their partial index
# (graph_objects_pending_spectasks_idx), after the cursor; those not marked ready whose
# blockers are all completed become ready. The page's rows are probed by id (an array, as in
# _UNBLOCK): as a join, a planner that expects most pending tasks to qualify hashes the page
# against a scan of the whole table, and the page stops being bounded (8 ms at 10,000 tasks).
# The page and the rows updated are the same rows, so they are of the same project.
_SWEEP = f"""
    WITH page AS MATERIALIZED (
        SELECT t.project_id, t.created_at, t.id FROM kb.graph_objects t
        WHERE t.type = '{SPEC_TASK}' AND t.status = 'pending'
          AND (t.project_id, t.created_at, t.id) > ($1::text, $2::timestamptz, $3::uuid)
        ORDER BY t.project_id, t.created_at, t.id
        LIMIT $4
    ), ready AS (
        UPDATE kb.graph_objects t
        SET properties = t.properties || '{{"ready": true}}',
            version = t.version + 1, updated_at = now()
        WHERE t.id = ANY (ARRAY(SELECT id FROM page))
          AND (t.project_id = ANY (ARRAY(SELECT project_id FROM page))) IS TRUE
          AND t.type = '{SPEC_TASK}' AND t.status = 'pending'
          AND (t.properties ->> 'ready') IS DISTINCT FROM 'true'
          AND NOT {UNFINISHED_BLOCKER}
        RETURNING t.project_id
    ), notified AS MATERIALIZED (
        SELECT count(pg_notify('{READY_CHANNEL}', p)) AS n
        FROM (SELECT DISTINCT project_id FROM ready) AS y (p)
    )
    SELECT (SELECT count(*) FROM ready) AS readied, last.project_id, last.created_at, last.id
    FROM notified LEFT JOIN (
        SELECT * FROM page ORDER BY project_id DESC, created_at DESC, id DESC LIMIT 1
    ) AS last ON true
    """


_EARLIEST = datetime.min.replace(tzinfo=UTC)
_NO_ID = uuid.UUID(int=0)


@dataclass(frozen=True, slots=True)
class SweepCursor:
    """Where the next ``sweep`` page starts (after this pending task)."""

    project_id: str = ""
    created_at: datetime = _EARLIEST
    task_id: uuid.UUID = _NO_ID


async def sweep(
    conn: asyncpg.Connection | asyncpg.Pool, cursor: SweepCursor, *, limit: int = SWEEP_PAGE
) -> tuple[int, SweepCursor]:
    """Readies up to ``limit`` pending tasks' worth of dependents left waiting; returns how
    many and the next cursor (back to the start after the last page).

    ``unblock`` runs right after the completing commit, in the same process: a dispatcher
    that dies between the two (or a completion made by another writer) would leave a
    raced dependent waiting for good. This bounded, index-ordered walk over pending tasks,
    a page per idle poll tick, finds such a task within a few passes.
    """
    row = await conn.fetchrow(_SWEEP, cursor.project_id, cursor.created_at, cursor.task_id, limit)
    assert row is not None  # the statement always returns its one row
    if row["id"] is None:
        return int(row["readied"]), SweepCursor()
    return int(row["readied"]), SweepCursor(row["project_id"], row["created_at"], row["id"])


async def unblock(
    conn: asyncpg.Connection | asyncpg.Pool, completed: Sequence[tuple[str, str]]
) -> int:
    """Marks ready the dependents of ``completed`` (project id, task id) whose blockers are
    all completed; run after the completing transaction committed. Returns how many.

    Why this closes the race: take a dependent D and, among the transactions completing its
    blockers, the one that commits last (L). If L's completing statement saw every other
    blocker completed, it readied D itself. Otherwise it saw D pending and not readied and
    asked for this re-check, which runs after L's commit, so after every other blocker's
    completion committed too: a statement started then sees all of D's blockers completed.
    Only L's own re-check is needed, so no transaction has to wait for another one.
    """
    if not completed:
        return 0
    row = await conn.fetchrow(
        _UNBLOCK, [p for p, _ in completed], [uuid.UUID(t) for _, t in completed]
    )
    return int(row["n"]) if row is not None else 0
