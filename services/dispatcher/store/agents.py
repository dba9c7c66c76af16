"""The dispatcher's reads of the project's agent definitions (written by the executor's
registry): the agents a selector may choose, and which assigned names are defined."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg

__all__ = ["AgentInfo", "defined_agents", "selectable_agents"]


@dataclass(frozen=True, kw_only=True, slots=True)
class AgentInfo:
    name: str
    description: str = ""
    tags: tuple[str, ...] = ()
    is_default: bool = False


async def selectable_agents(
    conn: asyncpg.Connection | asyncpg.Pool, project_id: str
) -> list[AgentInfo]:
    """The project's agents a selector may choose (internal ones never), by name."""
    rows = await conn.fetch(
        "SELECT name, description, tags, is_default FROM kb.agent_definitions "
        "WHERE project_id = $1 AND visibility <> 'internal' ORDER BY name",
        project_id,
    )
    return [
        AgentInfo(
            name=r["name"],
            description=r["description"],
            tags=tuple(r["tags"]),
            is_default=r["is_default"],
        )
        for r in rows
    ]


async def defined_agents(
    conn: asyncpg.Connection, project_id: str, names: Sequence[str]
) -> set[str]:
    """Which of ``names`` the project defines."""
    rows = await conn.fetch(
        "SELECT name FROM kb.agent_definitions WHERE project_id = $1 AND name = ANY($2)",
        project_id,
        list(names),
    )
    return {row["name"] for row in rows}
