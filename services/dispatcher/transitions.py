"""How an attempt ends (DESIGN §9 "Outcome"), as conditional updates: each applies only
while the task is still ``in_progress`` with the attempt's session, so a late or repeated
outcome (a second dispatcher, a cancelled graph) changes nothing."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import asyncpg

from agentfleet.graph import BLOCKS, SPEC_TASK
from services.dispatcher import sessions
from services.dispatcher.models import TASK_GRAPH, iso_now
from services.dispatcher.queries import notify_changes, notify_ready

__all__ = ["Attempt", "cancel", "complete", "fail", "graph_cancelled", "pause"]

_CURRENT = (
    "project_id = $1 AND id = $2 AND status = 'in_progress' AND properties ->> 'session_id' = $3"
)
_DROP = "- 'lease_owner' - 'lease_expires' - 'feedback'"


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
    status = await conn.fetchval(
        f"SELECT status FROM kb.graph_objects WHERE project_id = $1 AND id = $2 "
        f"AND type = '{TASK_GRAPH}'",
        attempt.project_id,
        uuid.UUID(attempt.graph_id),
    )
    return status == "cancelled"


async def complete(conn: asyncpg.Connection, attempt: Attempt, *, summary: str) -> bool:
    """Task completed; its dependents whose blockers are all completed become ready."""
    done = await conn.fetchval(
        f"""
        UPDATE kb.graph_objects
        SET properties = (properties {_DROP}) || jsonb_build_object(
                'status', 'completed', 'summary', $4::text, 'run_id', $5::text,
                'complete_time', $6::text),
            version = version + 1, updated_at = now()
        WHERE {_CURRENT}
        RETURNING id
        """,
        attempt.project_id,
        uuid.UUID(attempt.task_id),
        attempt.session_id,
        summary,
        attempt.run_id,
        iso_now(),
    )
    await sessions.finish_session(
        conn, attempt.project_id, attempt.session_id, outcome="completed", summary=summary
    )
    if done is not None:
        # Driven from the completed task's edges (a CTE, so the planner cannot turn it
        # into a scan of every pending task): each dependent's blockers are then checked.
        await conn.execute(
            f"""
            WITH deps AS MATERIALIZED (
                SELECT dst_id FROM kb.graph_relationships
                WHERE project_id = $1 AND src_id = $2 AND type = '{BLOCKS}'
            ), ready AS MATERIALIZED (
                SELECT d.dst_id FROM deps d
                WHERE NOT EXISTS (
                    SELECT 1 FROM kb.graph_relationships r
                    JOIN kb.graph_objects b ON b.id = r.src_id
                    WHERE r.project_id = $1 AND r.dst_id = d.dst_id AND r.type = '{BLOCKS}'
                      AND b.status IS DISTINCT FROM 'completed')
            )
            UPDATE kb.graph_objects t
            SET properties = t.properties || '{{"ready": true}}',
                version = t.version + 1, updated_at = now()
            FROM ready
            WHERE t.id = ready.dst_id AND t.project_id = $1 AND t.type = '{SPEC_TASK}'
              AND t.status = 'pending'
            """,
            attempt.project_id,
            uuid.UUID(attempt.task_id),
        )
        await notify_ready(conn, attempt.project_id)
    await notify_changes(conn, [attempt.graph_id])
    return done is not None


async def fail(conn: asyncpg.Connection, attempt: Attempt, *, error: str) -> str | None:
    """Back to pending for a retry while retries remain, else failed. Returns the status."""
    status = await conn.fetchval(
        f"""
        UPDATE kb.graph_objects
        SET properties = (properties {_DROP}) || jsonb_build_object('error_message', $4::text,
                'run_id', $5::text)
              || CASE WHEN coalesce((properties ->> 'retry_count')::int, 0)
                           < coalesce((properties ->> 'max_retries')::int, 2)
                 THEN jsonb_build_object('status', 'pending', 'ready', true, 'retry_count',
                          coalesce((properties ->> 'retry_count')::int, 0) + 1)
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
