"""Session graph objects: one per attempt of a task (DESIGN §9, seed 002 "sessions in the
graph"). ``has_session`` task -> session, ``follows_up`` session -> previous attempt,
``informed_by`` session -> the blocker sessions whose summaries went into its prompt."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from agentfleet.graph import BLOCKS, GraphObject, GraphRepository, NewObject
from services.dispatcher.models import FOLLOWS_UP, HAS_SESSION, INFORMED_BY, SESSION, iso_now
from services.dispatcher.prompt import BlockerResult

__all__ = ["Choice", "completed_blockers", "create_session", "finish_session", "set_run"]

OBJECT_COLUMNS = "id, project_id, type, key, properties, status, version, created_at, updated_at"


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


async def create_session(
    conn: asyncpg.Connection,
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
    existing = await conn.fetchrow(
        f"SELECT {OBJECT_COLUMNS} FROM kb.graph_objects WHERE project_id = $1 AND id = $2",
        project_id,
        uuid.UUID(session_id),
    )
    if existing is not None:
        return GraphObject.from_row(existing)
    repo = GraphRepository.bound(conn)
    properties: dict[str, Any] = {
        "task_id": task.id,
        "task_key": task.properties.get("key", ""),
        "graph_id": task.properties.get("graph_id"),
        "attempt": attempt,
        "agent_name": choice.agent_name,
        "chosen_by": choice.chosen_by,
        "reason": choice.reason,
        "status": "in_progress",
        "input": prompt,
        "resume_count": 0,
        "informed_by": list(informed_by),
        "dispatcher": dispatcher,
    }
    if follows_up:
        properties["follows_up_session_id"] = follows_up
    [session] = await repo.create_objects(
        project_id, [NewObject(id=uuid.UUID(session_id), type=SESSION, properties=properties)]
    )
    edges: list[tuple[str, str, str]] = [(HAS_SESSION, task.id, session_id)]
    if follows_up:
        edges.append((FOLLOWS_UP, session_id, follows_up))
    edges += [(INFORMED_BY, session_id, other) for other in informed_by]
    await repo.create_relationships(project_id, edges)
    return session


async def set_run(
    conn: asyncpg.Connection | asyncpg.Pool,
    project_id: str,
    session_id: str,
    run_id: str,
    trace_id: str | None,
) -> None:
    await conn.execute(
        """
        UPDATE kb.graph_objects
        SET properties = properties || jsonb_build_object('run_id', $3::text, 'trace_id', $4::text),
            version = version + 1, updated_at = now()
        WHERE project_id = $1 AND id = $2
        """,
        project_id,
        uuid.UUID(session_id),
        run_id,
        trace_id,
    )


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
