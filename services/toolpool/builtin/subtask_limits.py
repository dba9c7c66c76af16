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
from services.toolpool.runs import SUBTASK_AGENTS, read_scope

__all__ = [
    "MAX_CREATOR_DEPTH",
    "SUBTASK_AGENTS",
    "check_assigned_agents",
    "subtask_agents_of_caller",
]

MAX_CREATOR_DEPTH = 1
"""Deepest run that may create tasks: their runs start one level below it, and nothing at
depth 2 (the cap, DESIGN §6) spawns."""


async def subtask_agents_of_caller(conn: asyncpg.Connection, ctx: ToolContext) -> list[str]:
    """The calling run's definition's ``config.subtask_agents``; ToolError when that run may
    not create tasks (no such run, at the depth cap, or the list is empty)."""
    try:
        run_id = parse_id(ctx.run_id, "run_id")
    except InvalidArgument:
        run_id = None
    caller = None if run_id is None else await read_scope(conn, ctx.project_id, str(run_id))
    if caller is None:
        raise ToolError("create_subtasks can only be called by an agent run of this project")
    if caller.depth > MAX_CREATOR_DEPTH:
        raise ToolError(
            f"this run is at depth {caller.depth}: runs at depth {MAX_CREATOR_DEPTH + 1} "
            "cannot create tasks (their runs would pass the depth cap)"
        )
    if not caller.subtask_agents:
        raise ToolError(
            f"agent {caller.agent_name!r} may not create tasks: its definition names no "
            f"agents for them (config.{SUBTASK_AGENTS}: agent names or globs)"
        )
    return list(caller.subtask_agents)


def check_assigned_agents(tasks: Sequence[tuple[str, dict[str, Any]]], allowed: list[str]) -> None:
    """Every assigned_agent must be one the caller's definition allows."""
    for path, task in tasks:
        agent = task.get("assigned_agent")
        if agent and not agent_allowed(agent, allowed):
            raise ToolError(
                f"{path}.assigned_agent: {agent!r} is not an agent this agent may assign "
                f"tasks to (config.{SUBTASK_AGENTS}: {', '.join(allowed)})"
            )
