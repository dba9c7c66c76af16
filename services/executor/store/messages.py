"""``kb.agent_run_messages``: the statements the executor runs on it outside a step.

The table has no project_id: the reads of a conversation check the project through the run;
the writes and the retry checks name a run the caller has read by project (or holds).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import asyncpg

from agentfleet.postgres.rows import from_row

Db = asyncpg.Pool | asyncpg.Connection


@dataclass(frozen=True, kw_only=True, slots=True)
class MessageRow:
    """One message of a run's conversation (``content``: the ``types.Content`` JSON)."""

    seq: int
    step_number: int
    role: str
    content: Any


async def of_run(db: Db, project_id: str, run_id: str) -> list[MessageRow]:
    """The run's messages in seq order."""
    rows = await db.fetch(
        """
        SELECT m.seq, m.step_number, m.role, m.content FROM kb.agent_run_messages m
        JOIN kb.agent_runs r ON r.id = m.run_id
        WHERE r.project_id = $1 AND m.run_id = $2::uuid
        ORDER BY m.seq
        """,
        project_id,
        run_id,
    )
    return [from_row(MessageRow, r) for r in rows]


async def conversation(db: Db, project_id: str, run_id: str) -> list[MessageRow]:
    """The run's messages without the system one, in seq order."""
    rows = await db.fetch(
        """
        SELECT m.seq, m.step_number, m.role, m.content FROM kb.agent_run_messages m
        JOIN kb.agent_runs r ON r.id = m.run_id
        WHERE r.project_id = $1 AND m.run_id = $2::uuid AND m.role <> 'system'
        ORDER BY m.seq
        """,
        project_id,
        run_id,
    )
    return [from_row(MessageRow, r) for r in rows]


async def next_position(db: Db, run_id: str) -> tuple[int, int]:
    """(seq of the run's next message, step of its newest one)."""
    row = await db.fetchrow(
        """
        SELECT coalesce(max(seq) + 1, 0) AS seq, coalesce(max(step_number), 0) AS step
        FROM kb.agent_run_messages WHERE run_id = $1::uuid
        """,
        run_id,
    )
    return int(row["seq"]), int(row["step"])


async def insert(
    db: Db,
    run_id: str,
    *,
    seq: int,
    step: int,
    role: str,
    agent_name: str,
    content: dict[str, Any],
    tokens: int = 0,
    is_internal: bool = False,
) -> str:
    """Adds message ``seq`` (``content``: the ``types.Content`` JSON); its id.
    ``is_internal``: a message the executor wrote itself (a soft stop's request, a
    structured-output repair, a resume's default note), hidden unless asked for."""
    message_id = await db.fetchval(
        """
        INSERT INTO kb.agent_run_messages (run_id, seq, step_number, role, agent_name, content,
                                           tokens, is_internal)
        VALUES ($1::uuid, $2, $3, $4, $5, $6::jsonb, $7, $8)
        RETURNING id
        """,
        run_id,
        seq,
        step,
        role,
        agent_name,
        content,
        tokens,
        is_internal,
    )
    return str(message_id)


async def exists(db: Db, run_id: str, seq: int) -> bool:
    """Whether the run has its message number ``seq``."""
    return bool(
        await db.fetchval(
            "SELECT EXISTS (SELECT 1 FROM kb.agent_run_messages "
            "WHERE run_id = $1::uuid AND seq = $2)",
            run_id,
            seq,
        )
    )


async def user_text_at(db: Db, project_id: str, run_id: str, seq: int) -> str | None:
    """The text of the run's user message ``seq`` (a resume's input: the answer a paused
    remote child sends on); None when the run has no user message there."""
    content = await db.fetchval(
        """
        SELECT m.content FROM kb.agent_run_messages m
        JOIN kb.agent_runs r ON r.id = m.run_id
        WHERE r.project_id = $1 AND m.run_id = $2::uuid AND m.seq = $3 AND m.role = 'user'
        """,
        project_id,
        run_id,
        seq,
    )
    if content is None:
        return None
    return "".join(str(p.get("text") or "") for p in content.get("parts") or ())
