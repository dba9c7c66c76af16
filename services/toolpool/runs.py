"""What the toolpool knows of a calling run: its project, depth, status, whitelist and the
agents its tasks may run with. The toolpool's one read of ``kb.agent_runs``."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import asyncpg

from agentfleet.errors import FailedPrecondition, InvalidArgument, NotFound
from agentfleet.postgres.rows import from_row


@dataclass(frozen=True, kw_only=True, slots=True)
class RunScope:
    run_id: str
    project_id: str
    agent_name: str
    depth: int
    status: str
    tool_patterns: tuple[str, ...]
    """The run's definition's whitelist; empty when the definition is gone."""
    subtask_agents: tuple[str, ...] = ()
    """The definition's ``config.subtask_agents``: agents (names or globs) its tasks may run
    with; empty when it names none (the run may not create tasks)."""


SUBTASK_AGENTS = "subtask_agents"
"""Key of an agent definition's ``config``: the agent names and globs its tasks may run with
(empty or absent: the agent cannot create tasks)."""


async def read_scope(
    db: asyncpg.Pool | asyncpg.Connection, project_id: str, run_id: str
) -> RunScope | None:
    """The scope of run ``run_id`` (a UUID) of ``project_id``; None when there is none."""
    row = await db.fetchrow(
        """SELECT r.id::text AS run_id, r.project_id, r.agent_name, r.depth, r.status,
                  coalesce(d.tools, '{}') AS tools, d.config -> $3::text AS subtask_agents
           FROM kb.agent_runs r
           LEFT JOIN kb.agent_definitions d
             ON d.id = r.agent_definition_id AND d.project_id = r.project_id
           WHERE r.id = $1::uuid AND r.project_id = $2""",
        run_id,
        project_id,
        SUBTASK_AGENTS,
    )
    if row is None:
        return None
    value = row["subtask_agents"]
    agents = [a for a in value if isinstance(a, str) and a] if isinstance(value, list) else []
    return from_row(RunScope, row, tool_patterns=tuple(row["tools"]), subtask_agents=tuple(agents))


def parse_run_id(raw: str, *, field: str = "run_id") -> str:
    if not raw:
        raise InvalidArgument.for_field(field, "is required")
    try:
        return str(uuid.UUID(raw))
    except ValueError:
        raise InvalidArgument.for_field(field, f"{raw[:64]!r} is not a UUID") from None


class RunScopes:
    """Repository: reads the scope of a run, always within the caller's project.

    A running run's scope is cached for ``ttl_s``: a run calls many tools, its depth and
    project never change, and the executor cancels a stopped run's calls itself, so a few
    seconds of staleness cost nothing while the query leaves CallTool's hot path.

    The whitelist is cached with the status, not frozen for the run's life: an agent
    definition edited mid-run governs that run's calls within ``ttl_s``, and a run that
    stopped running is refused within ``ttl_s``. Freezing it would save nothing measurable:
    a cached call already sends no query (tests/integration/test_toolpool_hot_path.py).
    """

    def __init__(
        self,
        pool: asyncpg.Pool,
        *,
        ttl_s: float = 2.0,
        max_entries: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._pool = pool
        self._ttl_s = ttl_s
        self._clock = clock
        self._max_entries = max_entries
        self._running: dict[tuple[str, str], tuple[float, RunScope]] = {}

    async def get(self, project_id: str, run_id: str) -> RunScope:
        """The run's scope; NotFound when it is not a run of ``project_id``."""
        scope = await read_scope(self._pool, project_id, parse_run_id(run_id))
        if scope is None:
            raise NotFound(f"run {run_id} not found")
        return scope

    async def get_running(self, project_id: str, run_id: str) -> RunScope:
        """As :meth:`get`, refusing runs that are not executing: they may not call tools."""
        key = (project_id, run_id)
        now = self._clock()
        cached = self._running.get(key)
        if cached is not None and cached[0] > now:
            return cached[1]
        scope = await self.get(project_id, run_id)
        if scope.status != "running":
            self._running.pop(key, None)
            raise FailedPrecondition(f"run {run_id} is {scope.status}, not running")
        if len(self._running) >= self._max_entries:
            self._running.clear()
        self._running[key] = (now + self._ttl_s, scope)
        return scope
