"""Session graph objects: one per attempt of a task (DESIGN §9, seed 002 "sessions in the
graph"). ``has_session`` task -> session, ``follows_up`` session -> previous attempt,
``informed_by`` session -> the blocker sessions whose summaries went into its prompt."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from agentfleet.graph import (
    BLOCKS,
    HAS_MESSAGE,
    OBJECT_COLUMNS,
    SESSION,
    SESSION_MESSAGE,
    GraphObject,
    GraphRepository,
)
from services.dispatcher.models import (
    FOLLOWS_UP,
    HAS_SESSION,
    INFORMED_BY,
    TASK_GRAPH,
    iso_now,
)
from services.dispatcher.prompt import BlockerResult

__all__ = [
    "Choice",
    "completed_blockers",
    "create_session",
    "finish_session",
    "get_session",
    "record_conversations",
    "record_triage",
    "set_run",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class Choice:
    """Which agent runs an attempt, how it was chosen and why."""

    agent_name: str
    chosen_by: str
    """assigned | tag_rule | llm | default_agent"""
    reason: str


async def completed_blockers(
    conn: asyncpg.Connection | asyncpg.Pool, project_id: str, task_id: str
) -> list[BlockerResult]:
    """The task's completed blockers with their summaries and last sessions, by key."""
    rows = await conn.fetch(
        """
        SELECT b.properties ->> 'key' AS key, b.properties ->> 'title' AS title,
               coalesce(b.properties ->> 'summary', '') AS summary,
               b.properties ->> 'session_id' AS session_id
        FROM kb.graph_relationships r JOIN kb.graph_objects b ON b.id = r.src_id
        WHERE r.project_id = $1 AND r.dst_id = $2 AND r.type = $3 AND b.status = 'completed'
        ORDER BY 1
        """,
        project_id,
        uuid.UUID(task_id),
        BLOCKS,
    )
    return [
        BlockerResult(
            key=row["key"],
            title=row["title"] or "",
            summary=row["summary"],
            session_id=row["session_id"],
        )
        for row in rows
    ]


# The Session object and its edges in one statement. The session end of each edge is the
# row this statement inserts; the other end must be an object of the project (as
# GraphRepository.create_relationships checks). An existing session (an adopter got there
# first) inserts nothing and is read by the caller.
_CREATE_SESSION = f"""
    WITH session AS (
        INSERT INTO kb.graph_objects (id, project_id, type, properties)
        VALUES ($2::uuid, $1, '{SESSION}', $3::jsonb)
        ON CONFLICT (id) DO NOTHING
        RETURNING {OBJECT_COLUMNS}
    ), edges AS (
        INSERT INTO kb.graph_relationships (project_id, type, src_id, dst_id)
        SELECT $1, e.type, CASE WHEN e.outgoing THEN s.id ELSE o.id END,
               CASE WHEN e.outgoing THEN o.id ELSE s.id END
        FROM unnest($4::text[], $5::uuid[], $6::bool[]) AS e (type, other_id, outgoing)
        JOIN kb.graph_objects o ON o.project_id = $1 AND o.id = e.other_id
        CROSS JOIN session s
        ON CONFLICT (project_id, src_id, type, dst_id) DO NOTHING
    )
    SELECT {OBJECT_COLUMNS} FROM session
    """


async def create_session(
    conn: asyncpg.Connection | asyncpg.Pool,
    project_id: str,
    *,
    session_id: str,
    task: GraphObject,
    attempt: int,
    choice: Choice,
    prompt: str,
    follows_up: str | None,
    informed_by: Sequence[str],
    dispatcher: str = "",
) -> GraphObject:
    """Creates the Session and its edges; an existing one (an adopted dispatch) is returned
    as it is, so a session is created once whoever gets there."""
    properties: dict[str, Any] = {
        "task_id": task.id,
        "task_key": task.properties.get("key", ""),
        "graph_id": task.properties.get("graph_id"),
        "attempt": attempt,
        "agent_name": choice.agent_name,
        "chosen_by": choice.chosen_by,
        "reason": choice.reason,
        "status": "active",
        "input": prompt,
        "resume_count": 0,
        "informed_by": list(informed_by),
        "dispatcher": dispatcher,
    }
    if follows_up:
        properties["follows_up_session_id"] = follows_up
    # (type, other end, whether the edge goes from the session to the other end)
    edges: list[tuple[str, str, bool]] = [(HAS_SESSION, task.id, False)]
    if follows_up:
        edges.append((FOLLOWS_UP, follows_up, True))
    edges += [(INFORMED_BY, other, True) for other in informed_by]
    row = await conn.fetchrow(
        _CREATE_SESSION,
        project_id,
        uuid.UUID(session_id),
        properties,
        [kind for kind, _, _ in edges],
        [uuid.UUID(other) for _, other, _ in edges],
        [outgoing for _, _, outgoing in edges],
    )
    if row is not None:
        return GraphObject.from_row(row)
    existing = await get_session(conn, project_id, session_id)
    assert existing is not None  # the insert conflicted with it, and sessions are not deleted
    return existing


async def get_session(
    conn: asyncpg.Connection | asyncpg.Pool, project_id: str, session_id: str
) -> GraphObject | None:
    """The session, if it was created (an adopted attempt's earlier owner got that far)."""
    session = uuid.UUID(session_id)
    found = await GraphRepository(conn).get_objects(project_id, [str(session)])
    return found.get(str(session))


async def set_run(
    conn: asyncpg.Connection | asyncpg.Pool,
    project_id: str,
    session_id: str,
    run_id: str,
    trace_id: str | None,
    *,
    graph_id: str,
    task_id: str,
) -> bool:
    """Records the session's run, and the task's (its last_run_id while the attempt runs,
    if the task is still this attempt's); True when the task's graph is cancelled meanwhile
    (the run must then be cancelled), read in the same round trip."""
    cancelled = await conn.fetchval(
        f"""
        WITH recorded AS (
            UPDATE kb.graph_objects
            SET properties = properties
                  || jsonb_build_object('run_id', $3::text, 'trace_id', $4::text),
                version = version + 1, updated_at = now()
            WHERE project_id = $1 AND id = $2
        ), task AS (
            UPDATE kb.graph_objects
            SET properties = properties || jsonb_build_object('run_id', $3::text),
                version = version + 1, updated_at = now()
            WHERE project_id = $1 AND id = $6 AND status = 'in_progress'
              AND properties ->> 'session_id' = $2::text
        )
        SELECT coalesce((SELECT status = 'cancelled' FROM kb.graph_objects
                         WHERE project_id = $1 AND id = $5 AND type = '{TASK_GRAPH}'), false)
        """,
        project_id,
        uuid.UUID(session_id),
        run_id,
        trace_id,
        uuid.UUID(graph_id),
        uuid.UUID(task_id),
    )
    return bool(cancelled)


async def finish_session(
    conn: asyncpg.Connection,
    project_id: str,
    session_id: str,
    *,
    outcome: str,
    summary: str = "",
    error_message: str = "",
    final: bool = True,
    resumed: bool = False,
) -> None:
    """Records how the attempt ended (``final=False`` for a pause it will resume from)."""
    changes: dict[str, Any] = {"status": outcome}
    if summary:
        changes["summary"] = summary
    if error_message:
        changes["error_message"] = error_message
    if final:
        changes["complete_time"] = iso_now()
    await conn.execute(
        """
        UPDATE kb.graph_objects
        SET properties = properties || $3::jsonb
              || jsonb_build_object('resume_count',
                   coalesce((properties ->> 'resume_count')::int, 0) + $4::int),
            version = version + 1, updated_at = now()
        WHERE project_id = $1 AND id = $2
        """,
        project_id,
        uuid.UUID(session_id),
        changes,
        1 if resumed else 0,
    )


# Each run's conversation as SessionMessage objects under its session, each with a
# ``has_message`` edge carrying its sequence, and the session's message and token counts:
# one statement for any number of (project, session, run). A message's id derives from
# (session, seq), so recording again (after a resume, or by an adopter) adds only the
# messages not yet recorded. A run is read through its session's project, and only a
# Session object gets messages: a foreign run id or a wrong id records nothing.
_RECORD_CONVERSATIONS = f"""
    WITH run AS (
        SELECT p.project_id, p.session_id, r.id AS run_id, r.tokens_in, r.tokens_out
        FROM unnest($1::text[], $2::uuid[], $3::uuid[]) AS p (project_id, session_id, run_id)
        JOIN kb.agent_runs r ON r.id = p.run_id AND r.project_id = p.project_id
        JOIN kb.graph_objects s ON s.project_id = p.project_id AND s.id = p.session_id
             AND s.type = '{SESSION}'
    ), messages AS (
        SELECT run.project_id, run.session_id, run.run_id, m.seq, m.content, m.tokens,
               m.is_internal, m.created_at, m.step_number,
               CASE m.role WHEN 'model' THEN 'assistant' ELSE m.role END AS role,
               coalesce((SELECT string_agg(coalesce(p ->> 'text', p::text), E'\\n' ORDER BY o)
                         FROM jsonb_array_elements(coalesce(m.content -> 'parts', '[]'))
                              WITH ORDINALITY AS x (p, o)), '') AS text
        FROM run JOIN kb.agent_run_messages m ON m.run_id = run.run_id
    ), objects AS (
        INSERT INTO kb.graph_objects (id, project_id, type, properties)
        SELECT md5(m.session_id::text || ':' || m.seq)::uuid, m.project_id,
               '{SESSION_MESSAGE}',
               jsonb_build_object('role', m.role, 'content', m.text, 'sequence', m.seq + 1,
                   'timestamp', m.created_at, 'session_id', m.session_id::text,
                   'run_id', m.run_id::text, 'step', m.step_number, 'tokens', m.tokens,
                   'is_internal', m.is_internal)
        FROM messages m
        ON CONFLICT (id) DO NOTHING
        RETURNING id, project_id, (properties ->> 'session_id')::uuid AS session_id,
                  (properties ->> 'sequence')::int AS sequence
    ), edges AS (
        INSERT INTO kb.graph_relationships (project_id, type, src_id, dst_id, properties)
        SELECT o.project_id, '{HAS_MESSAGE}', o.session_id, o.id,
               jsonb_build_object('sequence', o.sequence)
        FROM objects o
        ON CONFLICT (project_id, src_id, type, dst_id) DO NOTHING
    ), counts AS (
        SELECT session_id, count(*) AS n FROM messages GROUP BY session_id
    )
    UPDATE kb.graph_objects g
    SET properties = g.properties || jsonb_build_object(
            'message_count', coalesce(c.n, 0),
            'tokens_in', run.tokens_in, 'tokens_out', run.tokens_out),
        version = g.version + 1, updated_at = now()
    FROM run LEFT JOIN counts c ON c.session_id = run.session_id
    WHERE g.project_id = run.project_id AND g.id = run.session_id
    """


async def record_conversations(
    conn: asyncpg.Connection | asyncpg.Pool, attempts: Sequence[tuple[str, str, str]]
) -> None:
    """Copies each (project_id, session_id, run_id)'s run messages into the graph under its
    session (SessionMessage objects, ``has_message`` edges with their sequence) and sets
    ``message_count``, ``tokens_in`` and ``tokens_out`` on the session. Idempotent; one
    round trip."""
    if not attempts:
        return
    await conn.execute(
        _RECORD_CONVERSATIONS,
        [project for project, _, _ in attempts],
        [uuid.UUID(session) for _, session, _ in attempts],
        [uuid.UUID(run) for _, _, run in attempts],
    )


async def record_triage(
    conn: asyncpg.Connection,
    project_id: str,
    *,
    task_id: str,
    session_id: str,
    decision: str,
    reason: str,
    agent: str = "",
) -> None:
    """Records the triage's decision and reason on the session; a reassignment also names
    the task's new ``assigned_agent``, whom the next attempt's selection takes."""
    await conn.execute(
        """
        WITH session AS (
            UPDATE kb.graph_objects
            SET properties = properties || jsonb_build_object('triage_decision', $4::text,
                    'triage_reason', $5::text),
                version = version + 1, updated_at = now()
            WHERE project_id = $1 AND id = $3
        )
        UPDATE kb.graph_objects
        SET properties = properties || jsonb_build_object('assigned_agent', $6::text),
            version = version + 1, updated_at = now()
        WHERE project_id = $1 AND id = $2 AND $6::text <> ''
        """,
        project_id,
        uuid.UUID(task_id),
        uuid.UUID(session_id),
        decision,
        reason,
        agent,
    )
