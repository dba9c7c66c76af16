"""What CallTool needs to know about a run: its project, depth, status and whitelist."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import asyncpg

from agentfleet.errors import FailedPrecondition, InvalidArgument, NotFound
from agentfleet.rows import from_row


@dataclass(frozen=True, kw_only=True, slots=True)
class RunScope:
    run_id: str
    project_id: str
    agent_name: str
    depth: int
    status: str
    tool_patterns: tuple[str, ...]
    """The run's definition's whitelist; empty when the definition is gone."""


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
        row = await self._pool.fetchrow(
            """SELECT r.id::text AS run_id, r.project_id, r.agent_name, r.depth, r.status,
                      coalesce(d.tools, '{}') AS tools
               FROM kb.agent_runs r
               LEFT JOIN kb.agent_definitions d
                 ON d.id = r.agent_definition_id AND d.project_id = r.project_id
               WHERE r.id = $1::uuid AND r.project_id = $2""",
            parse_run_id(run_id),
            project_id,
        )
        if row is None:
            raise NotFound(f"run {run_id} not found")
        return from_row(RunScope, row, tool_patterns=tuple(row["tools"]))

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
