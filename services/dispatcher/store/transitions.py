"""How an attempt ends (DESIGN §9 "Outcome"), as conditional updates: each applies only
while the task is still ``in_progress`` with the attempt's session, so a late or repeated
outcome (a second dispatcher, a cancelled graph) changes nothing. Readying the dependents a
completion left waiting is in ``dependents``."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

import asyncpg

from agentfleet.graph import BLOCKS, SPEC_TASK
from agentfleet.graph.task_properties import (
    DEFAULT_MAX_RETRIES,
    MAX_RETRIES_LIMIT,
    is_uuid,
    sql_int,
)
from services.dispatcher.models import TASK_GRAPH, iso_now
from services.dispatcher.store import sessions
from services.dispatcher.store.common import (
    CHANGES_CHANNEL,
    READY_CHANNEL,
    notify_changes,
    notify_ready,
)

__all__ = [
    "ENDED",
    "MAX_RETRIES",
    "RETRY_COUNT",
    "Attempt",
    "Completion",
    "RetryBackoff",
    "Settled",
    "cancel",
    "complete",
    "evaluation_subject",
    "exhaust_retries",
    "fail",
    "graph_cancelled",
    "pause",
    "settle",
]

ENDED = ("completed", "failed", "cancelled", "paused")
"""Run statuses that end an attempt (or, for paused, may be resumed)."""

_CURRENT = (
    "project_id = $1 AND id = $2 AND status = 'in_progress' AND properties ->> 'session_id' = $3"
)
_DROP = "- 'lease_owner' - 'lease_expires' - 'feedback'"
# Stored counters and bounds, read so that a malformed value can never make a statement
# raise: a bad retry_count counts as 0, a bad or missing max_retries as the default.
RETRY_COUNT = "coalesce({}, 0)".format(sql_int("properties -> 'retry_count'", 0, 2**31 - 2))
MAX_RETRIES = "coalesce({}, {})".format(
    sql_int("properties -> 'max_retries'", 0, MAX_RETRIES_LIMIT), DEFAULT_MAX_RETRIES
)


@dataclass(frozen=True, kw_only=True, slots=True)
class RetryBackoff:
    """How long a failed task waits before its retry: ``base_s`` before the first, doubling
    for each next one, at most ``max_s``; written as ``not_before`` (epoch seconds of the
    database clock), which the claim honours. A task that fails at once can therefore never
    spin: it retries at most ``max_retries`` times, each later than the one before."""

    base_s: float = 1.0
    max_s: float = 60.0


@dataclass(kw_only=True, slots=True)
class Attempt:
    """A dispatched attempt: its task, session and (once known) run."""

    project_id: str
    task_id: str
    graph_id: str
    session_id: str
    key: str = ""
    run_id: str | None = None
    resumes: int = 0
    """ResumeRun calls made in this session (stale PAUSED rows are recognised by it)."""


async def graph_cancelled(conn: asyncpg.Connection | asyncpg.Pool, attempt: Attempt) -> bool:
    if not is_uuid(attempt.graph_id):
        return False  # the claim refuses such a task; a value planted since changes nothing
    status = await conn.fetchval(
        f"SELECT status FROM kb.graph_objects WHERE project_id = $1 AND id = $2 "
        f"AND type = '{TASK_GRAPH}'",
        attempt.project_id,
        uuid.UUID(attempt.graph_id),
    )
    return status == "cancelled"


# Completes the given attempts (whose runs completed) and unblocks their dependents, in one
# statement: with one snapshot for all of it, a dependent's blockers that this statement
# completes still read in_progress, so ``done`` is subtracted from the blockers checked.
# Data-modifying CTEs always run; pg_notify is sent at commit (statement end in autocommit).
#
# The snapshot cannot see a blocker that a concurrent transaction completes (issue 8: two
# transactions completing the last two blockers of D each see the other one unfinished, and
# neither readies D). ``waiting`` reports that some dependent stayed pending and not ready;
# the caller then runs ``dependents.unblock`` for the completed tasks after its commit.
_RESUME_COUNT = "coalesce({}, 0)".format(sql_int("s.properties -> 'resume_count'", 0, 2**31 - 1))
_COMPLETE_CTES = f"""
    done AS (
        UPDATE kb.graph_objects t
        SET properties = (t.properties {_DROP}) || jsonb_build_object(
                'status', 'completed', 'summary', c.summary, 'run_id', c.run_id,
                'complete_time', $1::text)
              -- The run's structured output when its agent has an output_schema (#19).
              || CASE WHEN c.output IS NOT NULL THEN jsonb_build_object('output', c.output)
                      ELSE '{{}}'::jsonb END,
            version = t.version + 1, updated_at = now()
        FROM completed c
        WHERE t.project_id = c.project_id AND t.id = c.task_id AND t.status = 'in_progress'
          AND t.properties ->> 'session_id' = c.session_id
        RETURNING t.id, t.project_id
    ), finished AS (
        UPDATE kb.graph_objects s
        SET properties = s.properties || jsonb_build_object(
                'status', 'completed', 'complete_time', $1::text,
                'resume_count', {_RESUME_COUNT})
              || CASE WHEN c.summary <> '' THEN jsonb_build_object('summary', c.summary)
                      ELSE '{{}}'::jsonb END,
            version = s.version + 1, updated_at = now()
        FROM completed c
        WHERE s.project_id = c.project_id AND s.id = c.session_id::uuid
        RETURNING s.id
    ), deps AS MATERIALIZED (
        SELECT DISTINCT r.project_id, r.dst_id FROM done d
        JOIN kb.graph_relationships r
          ON r.project_id = d.project_id AND r.src_id = d.id AND r.type = '{BLOCKS}'
    ), ready AS (
        UPDATE kb.graph_objects t
        SET properties = t.properties || '{{"ready": true}}',
            version = t.version + 1, updated_at = now()
        FROM deps
        WHERE t.project_id = deps.project_id AND t.id = deps.dst_id
          AND t.type = '{SPEC_TASK}' AND t.status = 'pending'
          AND NOT EXISTS (
              SELECT 1 FROM kb.graph_relationships r JOIN kb.graph_objects b ON b.id = r.src_id
              WHERE r.project_id = deps.project_id AND r.dst_id = deps.dst_id
                AND r.type = '{BLOCKS}' AND b.status IS DISTINCT FROM 'completed'
                AND b.id NOT IN (SELECT id FROM done))
        RETURNING t.id, t.project_id
    ), waiting AS MATERIALIZED (
        SELECT EXISTS (
            SELECT 1 FROM deps JOIN kb.graph_objects t
              ON t.project_id = deps.project_id AND t.id = deps.dst_id
            WHERE t.type = '{SPEC_TASK}' AND t.status = 'pending'
              AND (t.properties ->> 'ready') IS DISTINCT FROM 'true'
              AND t.id NOT IN (SELECT id FROM ready)) AS w
    ), notified AS MATERIALIZED (
        SELECT (SELECT count(pg_notify('{CHANGES_CHANNEL}', g))
                FROM (SELECT DISTINCT graph_id FROM completed) AS x (g))
             + (SELECT count(pg_notify('{READY_CHANNEL}', p))
                FROM (SELECT DISTINCT project_id FROM ready) AS y (p)) AS n
    )"""

_SETTLE = f"""
    WITH followed AS (
        SELECT * FROM unnest($2::uuid[], $3::text[], $4::uuid[], $5::text[], $6::text[])
            AS f (run_id, project_id, task_id, session_id, graph_id)
    ), ended AS MATERIALIZED (
        SELECT f.*, r.status, coalesce(r.summary, '') AS summary, r.output,
               coalesce(r.error_message, '') AS error_message, r.total_steps, r.resume_count
        FROM followed f JOIN kb.agent_runs r ON r.id = f.run_id AND r.project_id = f.project_id
        WHERE r.status = ANY($7::text[])
    ), completed AS MATERIALIZED (
        SELECT project_id, task_id, session_id, graph_id, summary, run_id::text AS run_id,
               output
        FROM ended WHERE status = 'completed' AND $8::bool
    ), {_COMPLETE_CTES}
    SELECT e.run_id::text AS id, e.status, e.summary, e.error_message, e.total_steps,
           e.resume_count, e.task_id IN (SELECT id FROM done) AS task_completed,
           waiting.w AS recheck
    FROM ended e CROSS JOIN notified CROSS JOIN waiting
    """

_COMPLETE = f"""
    WITH completed AS MATERIALIZED (
        SELECT $2::text AS project_id, $3::uuid AS task_id, $4::text AS session_id,
               $5::text AS graph_id, $6::text AS summary, $7::text AS run_id,
               (SELECT r.output FROM kb.agent_runs r
                WHERE r.id = nullif($7::text, '')::uuid AND r.project_id = $2) AS output
    ), {_COMPLETE_CTES}
    SELECT EXISTS (SELECT 1 FROM done) AS done, waiting.w AS recheck
    FROM notified CROSS JOIN waiting
    """


@dataclass(kw_only=True, slots=True)
class Settled:
    """What one settle statement found: the followed runs that ended, by run id."""

    rows: list[asyncpg.Record] = field(default_factory=list)
    """id, status, summary, error_message, total_steps, resume_count, task_completed,
    recheck (the statement left a dependent waiting: ``unblock`` after the commit)"""


async def settle(
    conn: asyncpg.Connection | asyncpg.Pool, attempts: Sequence[Attempt], *, complete: bool
) -> Settled:
    """Reads which followed runs ended and, with ``complete``, completes the tasks of the
    completed ones in the same statement (one round trip for the common outcome). Rows with
    ``task_completed`` false still need their outcome applied by the caller."""
    followed = [a for a in attempts if a.run_id is not None]
    if not followed:
        return Settled()
    rows = await conn.fetch(
        _SETTLE,
        iso_now(),
        [uuid.UUID(str(a.run_id)) for a in followed],
        [a.project_id for a in followed],
        [uuid.UUID(a.task_id) for a in followed],
        [a.session_id for a in followed],
        [a.graph_id for a in followed],
        list(ENDED),
        complete,
    )
    return Settled(rows=list(rows))


@dataclass(frozen=True, kw_only=True, slots=True)
class Completion:
    done: bool
    """The task was still this attempt's and is now completed."""
    recheck: bool
    """A dependent stayed waiting: call ``unblock`` with the task once committed."""


async def complete(conn: asyncpg.Connection, attempt: Attempt, *, summary: str) -> Completion:
    """Task completed; its dependents whose blockers are all completed become ready."""
    row = await conn.fetchrow(
        _COMPLETE,
        iso_now(),
        attempt.project_id,
        uuid.UUID(attempt.task_id),
        attempt.session_id,
        attempt.graph_id,
        summary,
        attempt.run_id,
    )
    assert row is not None  # the statement always returns its one row
    return Completion(done=bool(row["done"]), recheck=bool(row["recheck"]))


async def exhaust_retries(conn: asyncpg.Connection, attempt: Attempt) -> None:
    """Uses up the task's retries, so that the next ``fail`` fails it for good (an attempt
    that no retry can fix, such as no agent to run it)."""
    await conn.execute(
        "UPDATE kb.graph_objects SET properties = properties || "
        f"jsonb_build_object('retry_count', {MAX_RETRIES}) "
        "WHERE project_id = $1 AND id = $2",
        attempt.project_id,
        uuid.UUID(attempt.task_id),
    )


async def evaluation_subject(pool: asyncpg.Pool, attempt: Attempt) -> asyncpg.Record | None:
    """The task's title and description for the output evaluator, and ``can_retry``: whether
    a rejected output may still send the task back for a retry."""
    return await pool.fetchrow(
        f"""SELECT properties ->> 'title' AS title,
                  coalesce(properties ->> 'description', '') AS description,
                  {RETRY_COUNT} < {MAX_RETRIES} AS can_retry
           FROM kb.graph_objects WHERE project_id = $1 AND id = $2::uuid""",
        attempt.project_id,
        attempt.task_id,
    )


async def fail(
    conn: asyncpg.Connection,
    attempt: Attempt,
    *,
    error: str,
    backoff: RetryBackoff | None = None,
) -> str | None:
    """Back to pending for a retry (after the backoff) while retries remain, else failed.
    Returns the status."""
    backoff = backoff or RetryBackoff()
    status = await conn.fetchval(
        f"""
        UPDATE kb.graph_objects
        SET properties = (properties {_DROP}) || jsonb_build_object('error_message', $4::text,
                'run_id', $5::text)
              || CASE WHEN {RETRY_COUNT} < {MAX_RETRIES}
                 THEN jsonb_build_object('status', 'pending', 'ready', true,
                          'retry_count', {RETRY_COUNT} + 1,
                          'not_before', extract(epoch FROM now())
                              + least($8::float8, $7::float8 * power(2, least({RETRY_COUNT}, 30))))
                 ELSE jsonb_build_object('status', 'failed', 'complete_time', $6::text) END,
            version = version + 1, updated_at = now()
        WHERE {_CURRENT}
        RETURNING status
        """,
        attempt.project_id,
        uuid.UUID(attempt.task_id),
        attempt.session_id,
        error,
        attempt.run_id,
        iso_now(),
        backoff.base_s,
        backoff.max_s,
    )
    await sessions.finish_session(
        conn, attempt.project_id, attempt.session_id, outcome="failed", error_message=error
    )
    if status == "pending":
        await notify_ready(conn, attempt.project_id)
    await notify_changes(conn, [attempt.graph_id])
    return status


async def _end(conn: asyncpg.Connection, attempt: Attempt, status: str, summary: str) -> None:
    await conn.execute(
        f"""
        UPDATE kb.graph_objects
        SET properties = (properties {_DROP}) || jsonb_build_object(
                'status', $4::text, 'run_id', $5::text, 'complete_time', $6::text,
                'partial_output', $7::text),
            version = version + 1, updated_at = now()
        WHERE {_CURRENT}
        """,
        attempt.project_id,
        uuid.UUID(attempt.task_id),
        attempt.session_id,
        status,
        attempt.run_id,
        iso_now(),
        summary,
    )
    await sessions.finish_session(
        conn, attempt.project_id, attempt.session_id, outcome=status, summary=summary
    )
    await notify_changes(conn, [attempt.graph_id])


async def pause(conn: asyncpg.Connection, attempt: Attempt, *, summary: str) -> None:
    """The run paused and cannot be resumed: the task ends PAUSED (dependents blocked)."""
    await _end(conn, attempt, "paused", summary)


async def cancel(conn: asyncpg.Connection, attempt: Attempt, *, summary: str = "") -> None:
    """The graph was cancelled: the task ends CANCELLED."""
    await _end(conn, attempt, "cancelled", summary)
