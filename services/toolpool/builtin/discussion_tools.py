"""Built-in tools for discussions between agents on a task (seed 000 D9's ``Discussion`` and
``DiscussionEntry`` types): ``open_discussion`` on a SpecTask, ``join_discussion`` to read
what was said and add an entry.

Discussions are reserved types: the generic graph tools read them but cannot write them,
so an entry's author (agent and run) is the run that made the call, never an argument.
Every count a model controls is bounded: discussions per task, entries per discussion,
characters per entry, entries returned.
"""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg

from agentfleet.graph import (
    DISCUSSION,
    DISCUSSION_ENTRY,
    HAS_DISCUSSION,
    HAS_ENTRY,
    OBJECT_COLUMNS,
    SPEC_TASK,
    GraphObject,
    parse_id,
)
from services.toolpool.builtin.base import ToolContext, ToolError, builtin_tool
from services.toolpool.builtin.schema_parts import integer, object_id, string

__all__ = ["DISCUSSION_TOOLS", "MAX_DISCUSSIONS_PER_TASK", "MAX_ENTRIES"]

MAX_DISCUSSIONS_PER_TASK = 20
MAX_ENTRIES = 200
"""Entries of one discussion; a discussion past it is full (open another)."""
MAX_ENTRY_CHARS = 8_000
MAX_SHOWN = 50

_MESSAGE = string("What you say (at most 8000 characters).", max_length=MAX_ENTRY_CHARS)


async def _author(ctx: ToolContext, conn: asyncpg.Connection) -> str:
    name = await conn.fetchval(
        "SELECT agent_name FROM kb.agent_runs WHERE id = $1::uuid AND project_id = $2",
        ctx.run_id,
        ctx.project_id,
    )
    return str(name or "")


async def _add_entry(
    ctx: ToolContext, conn: asyncpg.Connection, discussion: uuid.UUID, message: str
) -> int:
    """Appends an entry under the locked discussion row; its sequence (1-based)."""
    count = await conn.fetchval(
        f"""SELECT coalesce((properties ->> 'entry_count')::int, 0) FROM kb.graph_objects
            WHERE project_id = $1 AND id = $2 AND type = '{DISCUSSION}' FOR UPDATE""",
        ctx.project_id,
        discussion,
    )
    if count is None:
        raise ToolError(f"no discussion with id {discussion}")
    if count >= MAX_ENTRIES:
        raise ToolError(f"discussion {discussion} is full ({MAX_ENTRIES} entries): open another")
    sequence = count + 1
    author = await _author(ctx, conn)
    entry = await conn.fetchval(
        f"""INSERT INTO kb.graph_objects (project_id, type, properties)
            VALUES ($1, '{DISCUSSION_ENTRY}', jsonb_build_object('content', $2::text,
                'sequence', $3::int, 'author_agent', $4::text, 'author_run_id', $5::text,
                'discussion_id', $6::text, 'timestamp', now()))
            RETURNING id""",
        ctx.project_id,
        message,
        sequence,
        author,
        ctx.run_id,
        str(discussion),
    )
    await conn.execute(
        f"""INSERT INTO kb.graph_relationships (project_id, type, src_id, dst_id, properties)
            VALUES ($1, '{HAS_ENTRY}', $2, $3, jsonb_build_object('sequence', $4::int));
        """,
        ctx.project_id,
        discussion,
        entry,
        sequence,
    )
    await conn.execute(
        """UPDATE kb.graph_objects SET properties = properties
               || jsonb_build_object('entry_count', $3::int),
               version = version + 1, updated_at = now()
           WHERE project_id = $1 AND id = $2""",
        ctx.project_id,
        discussion,
        sequence,
    )
    return sequence


async def _show(
    ctx: ToolContext, conn: asyncpg.Connection, discussion: uuid.UUID, after: int
) -> dict[str, Any]:
    row = await conn.fetchrow(
        f"SELECT {OBJECT_COLUMNS} FROM kb.graph_objects WHERE project_id = $1 AND id = $2",
        ctx.project_id,
        discussion,
    )
    entries = await conn.fetch(
        f"""SELECT e.properties FROM kb.graph_relationships r
            JOIN kb.graph_objects e ON e.id = r.dst_id AND e.project_id = r.project_id
            WHERE r.project_id = $1 AND r.src_id = $2 AND r.type = '{HAS_ENTRY}'
              AND (r.properties ->> 'sequence')::int > $3
            ORDER BY (r.properties ->> 'sequence')::int LIMIT {MAX_SHOWN}""",
        ctx.project_id,
        discussion,
        after,
    )
    return {
        "discussion": GraphObject.from_row(row).to_json(),
        "entries": [
            {k: e["properties"].get(k) for k in ("sequence", "author_agent", "content")}
            for e in entries
        ],
    }


async def _task_of(ctx: ToolContext, conn: asyncpg.Connection, task_id: str | None) -> uuid.UUID:
    """The task named, else the one the calling run is an attempt of (its ``run_id``)."""
    if task_id is not None:
        return parse_id(task_id, "task_id")
    found = await conn.fetchval(
        f"""SELECT id FROM kb.graph_objects
            WHERE project_id = $1 AND type = '{SPEC_TASK}' AND properties @> $2::jsonb
            LIMIT 1""",
        ctx.project_id,
        {"run_id": ctx.run_id},
    )
    if found is None:
        raise ToolError("this run works on no task: give task_id")
    return found


@builtin_tool(
    {
        "task_id": object_id(
            "Id of the SpecTask the discussion is about (default: the task this run works on)."
        ),
        "topic": string("What is to be discussed."),
        "message": _MESSAGE,
    },
    required=("topic",),
)
async def open_discussion(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    """Opens a discussion on a task, optionally with a first entry, so that other agents can
    join it (join_discussion) and read what was said. Returns the discussion and its
    entries."""
    async with ctx.pool.acquire() as conn, conn.transaction():
        task = await _task_of(ctx, conn, args.get("task_id"))
        # The task row's lock serialises the per-task bound.
        is_task = await conn.fetchval(
            f"""SELECT true FROM kb.graph_objects
                WHERE project_id = $1 AND id = $2 AND type = '{SPEC_TASK}' FOR UPDATE""",
            ctx.project_id,
            task,
        )
        if not is_task:
            raise ToolError(f"no task with id {task}")
        found = await conn.fetchval(
            f"""SELECT count(*) FROM kb.graph_relationships
                WHERE project_id = $1 AND src_id = $2 AND type = '{HAS_DISCUSSION}'""",
            ctx.project_id,
            task,
        )
        if found >= MAX_DISCUSSIONS_PER_TASK:
            raise ToolError(
                f"task {task} has {found} discussions, the most a task may have: join one"
            )
        discussion = await conn.fetchval(
            f"""INSERT INTO kb.graph_objects (project_id, type, properties)
                VALUES ($1, '{DISCUSSION}', jsonb_build_object('title', $2::text,
                    'task_id', $3::text, 'status', 'open', 'entry_count', 0,
                    'opened_by_agent', $4::text, 'opened_by_run_id', $5::text))
                RETURNING id""",
            ctx.project_id,
            args["topic"],
            str(task),
            await _author(ctx, conn),
            ctx.run_id,
        )
        await conn.execute(
            f"""INSERT INTO kb.graph_relationships (project_id, type, src_id, dst_id)
                VALUES ($1, '{HAS_DISCUSSION}', $2, $3)""",
            ctx.project_id,
            task,
            discussion,
        )
        if args.get("message"):
            await _add_entry(ctx, conn, discussion, args["message"])
        return await _show(ctx, conn, discussion, 0)


@builtin_tool(
    {
        "discussion_id": object_id("Id of the discussion."),
        "message": _MESSAGE,
        "after_sequence": integer(
            "Show only entries after this one (default 0: from the start).",
            minimum=0,
            maximum=MAX_ENTRIES,
        ),
    },
    required=("discussion_id",),
)
async def join_discussion(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    """Reads a discussion's entries (at most 50 from after_sequence) and, with a message,
    adds yours at the end. Returns the discussion and the entries."""
    discussion = parse_id(args["discussion_id"], "discussion_id")
    async with ctx.pool.acquire() as conn, conn.transaction():
        if args.get("message"):
            await _add_entry(ctx, conn, discussion, args["message"])
        exists = await conn.fetchval(
            f"""SELECT true FROM kb.graph_objects
                WHERE project_id = $1 AND id = $2 AND type = '{DISCUSSION}'""",
            ctx.project_id,
            discussion,
        )
        if not exists:
            raise ToolError(f"no discussion with id {discussion}")
        return await _show(ctx, conn, discussion, int(args.get("after_sequence", 0)))


DISCUSSION_TOOLS = [open_discussion, join_discussion]
