"""Who may create tasks with ``create_subtasks``, and for which agents: read from the
calling run and its definition (``config.subtask_agents``), never from the arguments."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import asyncpg

from agentfleet.errors import InvalidArgument
from agentfleet.graph import parse_id
from agentfleet.graph.task_properties import agent_allowed
from services.toolpool.builtin.base import ToolContext, ToolError

__all__ = [
    "MAX_CREATOR_DEPTH",
    "SUBTASK_AGENTS",
    "check_assigned_agents",
    "subtask_agents_of_caller",
]

MAX_CREATOR_DEPTH = 1
"""Deepest run that may create tasks: their runs start one level below it, and nothing at
depth 2 (the cap, DESIGN §6) spawns."""
SUBTASK_AGENTS = "subtask_agents"
"""Key of an agent definition's ``config``: the agent names and globs its tasks may run with
(empty or absent: the agent cannot create tasks)."""


async def subtask_agents_of_caller(conn: asyncpg.Connection, ctx: ToolContext) -> list[str]:
    """The calling run's definition's ``config.subtask_agents``; ToolError when that run may
    not create tasks (no such run, at the depth cap, or the list is empty)."""
    try:
        run_id = parse_id(ctx.run_id, "run_id")
    except InvalidArgument:
        run_id = None
    row = None
    if run_id is not None:
        row = await conn.fetchrow(
            """SELECT r.agent_name, r.depth, d.config -> $3::text AS allowed
               FROM kb.agent_runs r
               LEFT JOIN kb.agent_definitions d
                 ON d.id = r.agent_definition_id AND d.project_id = r.project_id
               WHERE r.project_id = $1 AND r.id = $2""",
            ctx.project_id,
            run_id,
            SUBTASK_AGENTS,
        )
    if row is None:
        raise ToolError("create_subtasks can only be called by an agent run of this project")
    if row["depth"] > MAX_CREATOR_DEPTH:
        raise ToolError(
            f"this run is at depth {row['depth']}: runs at depth {MAX_CREATOR_DEPTH + 1} "
            "cannot create tasks (their runs would pass the depth cap)"
        )
    value = row["allowed"]
    allowed = [p for p in value if isinstance(p, str) and p] if isinstance(value, list) else []
    if not allowed:
        raise ToolError(
            f"agent {row['agent_name']!r} may not create tasks: its definition names no "
            f"agents for them (config.{SUBTASK_AGENTS}: agent names or globs)"
        )
    return allowed


def check_assigned_agents(tasks: Sequence[tuple[str, dict[str, Any]]], allowed: list[str]) -> None:
    """Every assigned_agent must be one the caller's definition allows."""
    for path, task in tasks:
        agent = task.get("assigned_agent")
        if agent and not agent_allowed(agent, allowed):
            raise ToolError(
                f"{path}.assigned_agent: {agent!r} is not an agent this agent may assign "
                f"tasks to (config.{SUBTASK_AGENTS}: {', '.join(allowed)})"
            )
