"""Sessions' conversations and discussions are records of who said what (issue 37 item 4):
a session never gets another project's run's messages, recording twice adds nothing, and
no model can write or forge them through the graph tools (an author is the calling run)."""

from __future__ import annotations

import uuid

import asyncpg
import pytest

from services.dispatcher.store import sessions
from services.toolpool.builtin import ToolContext, ToolError, call_builtin
from tests.integration.test_builtin_tools import agent_run

OURS, THEIRS = "proj-records", "proj-snoop"


async def session_with_run(pool: asyncpg.Pool, project_id: str) -> tuple[str, str]:
    """A Session object and a run with two messages, both of ``project_id``."""
    run_id = await agent_run(pool, project_id)
    for seq, role, text in [(0, "user", "secret plan"), (1, "model", "ok")]:
        await pool.execute(
            "INSERT INTO kb.agent_run_messages (run_id, seq, role, agent_name, content) "
            "VALUES ($1::uuid, $2, $3, 'planner', $4::jsonb)",
            run_id,
            seq,
            role,
            {"role": role, "parts": [{"text": text}]},
        )
    session_id = await pool.fetchval(
        "INSERT INTO kb.graph_objects (project_id, type, properties) "
        "VALUES ($1, 'Session', '{\"status\": \"active\"}') RETURNING id::text",
        project_id,
    )
    return session_id, run_id


async def messages_of(pool: asyncpg.Pool, session_id: str) -> list[str]:
    rows = await pool.fetch(
        "SELECT m.properties ->> 'content' AS content FROM kb.graph_relationships r "
        "JOIN kb.graph_objects m ON m.id = r.dst_id "
        "WHERE r.src_id = $1::uuid AND r.type = 'has_message' "
        "ORDER BY (r.properties ->> 'sequence')::int",
        session_id,
    )
    return [r["content"] for r in rows]


async def test_a_session_gets_only_its_own_projects_run(db_pool: asyncpg.Pool) -> None:
    ours, _ = await session_with_run(db_pool, OURS)
    _, their_run = await session_with_run(db_pool, THEIRS)
    # A run id of another project, named as if it were this session's: nothing is copied.
    await sessions.record_conversations(db_pool, [(OURS, ours, their_run)])
    assert await messages_of(db_pool, ours) == []
    # Nor does another project's name for our session reach it.
    await sessions.record_conversations(db_pool, [(THEIRS, ours, their_run)])
    assert await messages_of(db_pool, ours) == []
    # Not a Session: a SpecTask gets no messages.
    task = await db_pool.fetchval(
        "INSERT INTO kb.graph_objects (project_id, type, properties) "
        "VALUES ($1, 'SpecTask', '{}') RETURNING id::text",
        THEIRS,
    )
    await sessions.record_conversations(db_pool, [(THEIRS, task, their_run)])
    assert await messages_of(db_pool, task) == []


async def test_recording_twice_adds_nothing(db_pool: asyncpg.Pool) -> None:
    session_id, run_id = await session_with_run(db_pool, OURS)
    for _ in range(2):
        await sessions.record_conversations(db_pool, [(OURS, session_id, run_id)])
    assert await messages_of(db_pool, session_id) == ["secret plan", "ok"]
    count = await db_pool.fetchval(
        "SELECT properties -> 'message_count' FROM kb.graph_objects WHERE id = $1::uuid",
        session_id,
    )
    assert count == 2


async def test_models_cannot_forge_records(db_pool: asyncpg.Pool) -> None:
    session_id, run_id = await session_with_run(db_pool, OURS)
    await sessions.record_conversations(db_pool, [(OURS, session_id, run_id)])
    ctx = ToolContext(project_id=OURS, run_id=run_id, pool=db_pool)
    task = await db_pool.fetchval(
        "INSERT INTO kb.graph_objects (project_id, type, properties) "
        "VALUES ($1, 'SpecTask', '{}') RETURNING id::text",
        OURS,
    )
    some_doc = (await call_builtin(ctx, "create_entity", {"type": "Doc", "properties": {}}))[
        "entity"
    ]["id"]
    for name, args in [
        ("create_entity", {"type": "SessionMessage", "properties": {"role": "user"}}),
        ("create_entity", {"type": "Discussion", "properties": {}}),
        ("create_relationship", {"type": "has_message", "src_id": session_id, "dst_id": some_doc}),
        ("create_relationship", {"type": "has_entry", "src_id": some_doc, "dst_id": some_doc}),
        ("create_relationship", {"type": "has_discussion", "src_id": task, "dst_id": some_doc}),
    ]:
        with pytest.raises(ToolError, match="reserved"):
            await call_builtin(ctx, name, args)
    # The author of an entry is the calling run: an argument naming one is refused.
    with pytest.raises(ToolError, match="author_agent"):
        await call_builtin(
            ctx,
            "open_discussion",
            {"task_id": task, "topic": "t", "message": "m", "author_agent": "admin"},
        )
    with pytest.raises(ToolError, match="no discussion"):
        await call_builtin(
            ctx, "join_discussion", {"discussion_id": str(uuid.uuid4()), "message": "m"}
        )
