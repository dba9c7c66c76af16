"""The failure triage's statements (:mod:`services.dispatcher.triage`): what the triage
model is shown, and the escalation it may decide. The retry and reassignment it may decide
are ``transitions.fail`` and ``sessions.record_triage``."""

from __future__ import annotations

import uuid

import asyncpg

from services.dispatcher.models import TASK_GRAPH, iso_now
from services.dispatcher.store import sessions
from services.dispatcher.store.common import notify_changes

# The attempt-is-current condition and the lease columns an end drops: shared with the
# other ends of an attempt, so an escalation is conditional exactly as they are.
from services.dispatcher.store.transitions import (
    _CURRENT,
    _DROP,
    MAX_RETRIES,
    RETRY_COUNT,
    Attempt,
)

__all__ = ["escalate", "triage_subject"]


async def triage_subject(
    conn: asyncpg.Connection | asyncpg.Pool, attempt: Attempt
) -> asyncpg.Record | None:
    """What the failure triage is shown, when the task's graph asked for triage
    (``llm_triage``) and a retry remains: title, description, the failed attempt's agent,
    the task's properties, and the project's other agents (the first 200 by name).
    ``None`` otherwise."""
    return await conn.fetchrow(
        f"""
        SELECT t.properties ->> 'title' AS title,
               coalesce(t.properties ->> 'description', '') AS description,
               s.properties ->> 'agent_name' AS agent, t.properties AS properties,
               coalesce((SELECT array_agg(d.name ORDER BY d.name) FROM (
                   SELECT name FROM kb.agent_definitions
                   WHERE project_id = $1 AND name <> s.properties ->> 'agent_name'
                   ORDER BY name LIMIT 200) d), '{{}}') AS candidates
        FROM kb.graph_objects t
        JOIN kb.graph_objects g ON g.project_id = t.project_id AND g.id = $4
             AND g.type = '{TASK_GRAPH}'
        JOIN kb.graph_objects s ON s.project_id = t.project_id AND s.id = $3
        WHERE t.project_id = $1 AND t.id = $2 AND g.properties -> 'llm_triage' = 'true'
          AND (SELECT {RETRY_COUNT} < {MAX_RETRIES} FROM kb.graph_objects WHERE id = t.id)
        """,
        attempt.project_id,
        uuid.UUID(attempt.task_id),
        uuid.UUID(attempt.session_id),
        uuid.UUID(attempt.graph_id),
    )


async def escalate(conn: asyncpg.Connection, attempt: Attempt, *, error: str, reason: str) -> None:
    """The triage escalated the failed attempt: the task ends PAUSED (no new attempt, its
    dependents wait) with why in its ``error_message``, until a person calls RetryTask."""
    await conn.execute(
        f"""
        UPDATE kb.graph_objects
        SET properties = (properties {_DROP}) || jsonb_build_object(
                'status', 'paused', 'run_id', $4::text, 'complete_time', $5::text,
                'error_message', $6::text, 'escalated', true),
            version = version + 1, updated_at = now()
        WHERE {_CURRENT}
        """,
        attempt.project_id,
        uuid.UUID(attempt.task_id),
        attempt.session_id,
        attempt.run_id,
        iso_now(),
        f"escalated for a person: {reason}; the attempt failed with: {error}",
    )
    await sessions.finish_session(
        conn, attempt.project_id, attempt.session_id, outcome="failed", error_message=error
    )
    await notify_changes(conn, [attempt.graph_id])
