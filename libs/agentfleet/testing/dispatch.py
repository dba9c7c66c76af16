"""The executor's stand-ins for testing and measuring the dispatcher alone (tests,
bench/dispatch.py): :class:`InstantRuns` stores a triggered run ``completed`` at once, with
the run-event NOTIFY the real executor sends, so what is left is the dispatcher's own work;
:class:`RunningRuns` stores it ``running`` (an agent that takes long) until the test ends
it with :meth:`RunningRuns.finish`."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import asyncpg

from agentfleet import events

if TYPE_CHECKING:  # typing only: the library does not depend on the services
    from services.dispatcher.runs import RunRequest

__all__ = ["InstantRuns", "RunningRuns"]


class InstantRuns:
    """Implements the dispatcher's RunControl: runs complete the moment they are triggered
    (idempotent by request_id, like TriggerRun); cancel and resume are not supported."""

    status = "completed"
    """What a triggered run is at once."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool
        self.triggered = 0

    async def trigger(self, run: RunRequest) -> str:
        self.triggered += 1
        async with self._pool.acquire() as conn, conn.transaction():
            run_id = await conn.fetchval(
                """
                INSERT INTO kb.agent_runs (project_id, agent_name, status, input, summary,
                    request_id, task_id, started_at, completed_at)
                VALUES ($1, $2, $6, $3, CASE WHEN $6 = 'completed' THEN 'done ' || $3 END,
                        $4, $5, now(), CASE WHEN $6 = 'completed' THEN now() END)
                ON CONFLICT (project_id, request_id) WHERE request_id IS NOT NULL
                DO UPDATE SET request_id = EXCLUDED.request_id
                RETURNING id::text
                """,
                run.project_id,
                run.agent_name,
                run.input,
                run.request_id,
                uuid.UUID(run.task_id),
                self.status,
            )
            if self.status == "completed":
                await conn.execute("SELECT pg_notify($1, $2)", events.CHANNEL, f"{run_id}:1")
        return str(run_id)

    async def cancel(self, project_id: str, run_id: str, reason: str) -> None:
        return None

    async def resume(self, project_id: str, run_id: str, request_id: str) -> str | None:
        return "not supported"


class RunningRuns(InstantRuns):
    """:class:`InstantRuns` whose runs stay ``running`` (each holds its task's slot) until
    :meth:`finish`."""

    status = "running"

    async def finish(self, task_id: str) -> None:
        """Completes the running run of the task, with the NOTIFY the executor sends."""
        async with self._pool.acquire() as conn, conn.transaction():
            run_id = await conn.fetchval(
                """
                UPDATE kb.agent_runs SET status = 'completed', summary = 'done',
                    completed_at = now()
                WHERE task_id = $1 AND status = 'running'
                RETURNING id::text
                """,
                uuid.UUID(task_id),
            )
            assert run_id is not None, f"task {task_id} has no running run"
            await conn.execute("SELECT pg_notify($1, $2)", events.CHANNEL, f"{run_id}:1")
