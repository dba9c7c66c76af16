"""The run queue: ``kb.agent_runs`` rows as the executor's work queue (DESIGN §4).

StartRun/TriggerRun :meth:`RunQueue.enqueue` a ``queued`` run (at most
``max_queued_per_project`` top-level runs queued per project) and NOTIFY
``agentfleet_runs_queued``; workers :meth:`RunQueue.claim` runs round robin across projects
with ``FOR UPDATE SKIP LOCKED``, hold a lease renewed by :meth:`RunQueue.heartbeat`, and
end the run with a conditional :meth:`RunQueue.finish`. Every status change is a
conditional UPDATE that reports whether it applied, so two workers (or a worker and a
CancelRun) can never both move one run.

CancelRun is :meth:`RunQueue.request_cancel`: a queued, waiting or paused run is cancelled at
once (a waiting run's held tool calls are answered, never executed);
a running one gets ``cancel_requested_at`` and a NOTIFY on ``agentfleet_run_cancel``
(payload ``{"run_id": ..., "reason": ...}``) for whichever worker holds it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from agentfleet import events
from agentfleet.db import notify
from agentfleet.errors import NotFound, ResourceExhausted
from services.executor.approval_store import answer_held_calls, expire_overdue_approvals
from services.executor.claim_sql import CLAIM, CLAIM_ANY, claimed_definition
from services.executor.registry.definitions import AgentDefinition
from services.executor.runs import RunRecord, RunStatus, StartRunParams, append_run_events

QUEUED_CHANNEL = "agentfleet_runs_queued"
"""NOTIFY channel of newly queued runs; payload: the run id."""
CANCEL_CHANNEL = "agentfleet_run_cancel"
"""NOTIFY channel of cancel requests; payload: JSON ``{"run_id", "reason"}``."""
DEFAULT_CANCEL_REASON = "cancelled by user"

# $16: the project's cap on queued top-level runs (NULL: none, as for children). The count
# stops at the cap, so it reads at most $16 entries of agent_runs_queued_project_idx.
_INSERT = """
INSERT INTO kb.agent_runs (
    project_id, agent_definition_id, agent_name, input, labels, max_steps, timeout,
    request_id, task_id, trace_id, trace_parent, parent_run_id, root_run_id, depth, max_tokens,
    thread_id, stream_deltas)
SELECT $1::text, $2::uuid, $3::text, $4::text, $5::jsonb, $6::integer,
       make_interval(secs => $7::double precision), $8::text, $9::uuid, $10::text, $11::text,
       $12::uuid, $13::uuid, $14::integer, $15::bigint, $17::text,
       $18::boolean
WHERE $16::integer IS NULL
   OR (SELECT count(*) FROM (
           SELECT 1 FROM kb.agent_runs
           WHERE project_id = $1::text AND status = 'queued' AND depth = 0
           LIMIT $16::integer) queued) < $16::integer
ON CONFLICT (project_id, request_id) WHERE request_id IS NOT NULL DO NOTHING
RETURNING *
"""
# The insert with the workers' wake-up in the same round trip (NOTIFY is delivered at commit,
# so no worker looks before the run and its RUN_QUEUED event are visible).
_INSERT_AND_NOTIFY = f"""
WITH inserted AS ({_INSERT})
SELECT inserted.*, pg_notify('{QUEUED_CHANNEL}', inserted.id::text) FROM inserted
"""

RESUME_LEASE_OWNER = "resume-requested"
"""lease_owner of a run ResumeRun moved to ``running``: an expired lease that the next
worker claims at once, marking the execution as a resume rather than a recovery."""

_FINISH = """
UPDATE kb.agent_runs
SET status = $4,
    summary = $5,
    error_message = $6,
    completed_at = now(),
    duration_ms = greatest(0, (extract(epoch FROM clock_timestamp()
                                       - coalesce(started_at, created_at)) * 1000)::bigint),
    lease_owner = NULL,
    lease_expires_at = NULL,
    output = $7::jsonb
WHERE project_id = $1 AND id = $2::uuid AND status = ANY($3::text[])
RETURNING *
"""


@dataclass(frozen=True, kw_only=True, slots=True)
class HeartbeatResult:
    """What one heartbeat learned about the runs a worker holds."""

    held: frozenset[str]
    """Runs whose lease was renewed; any other run of the worker lost its lease."""
    cancel_requested: frozenset[str]
    """Held runs with a cancel request (the fallback for a missed NOTIFY)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ClaimedRun:
    """A run a worker claimed, with what it needs to start it."""

    run: RunRecord
    previous_owner: str | None
    """Lease owner of a run taken over (:data:`RESUME_LEASE_OWNER`: a resumed one); None
    for a run that was queued."""
    definition: AgentDefinition | None
    """The definition the run executes, read by the claim; None when the run names none or
    it was deleted (the loop reads it by name, or reports it missing)."""


DEFAULT_MAX_RUNNING_PER_PROJECT = 64
DEFAULT_MAX_QUEUED_PER_PROJECT = 1000
MAX_QUEUED_SETTING = "AGENTFLEET_MAX_QUEUED_PER_PROJECT"
"""The setting named when a project's queue is full."""


class RunQueue:
    """Queue operations on ``kb.agent_runs``; one method per statement (or transaction)."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        *,
        max_running_per_project: int = DEFAULT_MAX_RUNNING_PER_PROJECT,
        max_queued_per_project: int = DEFAULT_MAX_QUEUED_PER_PROJECT,
    ) -> None:
        self._pool = pool
        self._max_running_per_project = max_running_per_project
        self._max_queued_per_project = max_queued_per_project

    async def enqueue(self, params: StartRunParams) -> tuple[RunRecord, bool]:
        """Inserts a ``queued`` run with its RUN_QUEUED event and NOTIFYs the workers.

        With a ``request_id`` seen before in the project, returns that run and False. A
        top-level run is refused with :class:`ResourceExhausted` when its project already
        has ``max_queued_per_project`` top-level runs queued; nothing is written then.
        """
        top_level = params.parent_run_id is None
        async with self._pool.acquire() as conn, conn.transaction():
            if top_level:
                # Serialises the count and the insert per project, so concurrent enqueues
                # never pass the cap: the insert's snapshot is taken after the lock.
                await conn.execute(
                    "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
                    f"agentfleet.run-queue:{params.project_id}",
                )
            run, created, _ = await self.enqueue_in(
                conn, params, max_queued=self._max_queued_per_project if top_level else None
            )
        return run, created

    @staticmethod
    async def enqueue_in(
        conn: asyncpg.Connection, params: StartRunParams, *, max_queued: int | None = None
    ) -> tuple[RunRecord, bool, list[events.PersistedEvent]]:
        """:meth:`enqueue` in the caller's transaction (spawn_agents writes its children and
        the parent's tool call together); the caller publishes the events after commit.

        ``max_queued``: refuse (:class:`ResourceExhausted`) when the project has that many
        top-level runs queued; None (children) checks nothing."""
        row = await conn.fetchrow(
            _INSERT_AND_NOTIFY,
            params.project_id,
            params.agent_definition_id,
            params.agent_name,
            params.input,
            dict(params.labels),
            params.max_steps,
            params.timeout_s,
            params.request_id,
            params.task_id,
            params.trace_id,
            params.trace_parent,
            params.parent_run_id,
            params.root_run_id,
            params.depth,
            params.max_tokens,
            max_queued,
            params.thread_id,
            params.stream_deltas,
        )
        if row is None:
            existing = None
            if params.request_id is not None:
                existing = await conn.fetchrow(
                    "SELECT * FROM kb.agent_runs WHERE project_id = $1 AND request_id = $2",
                    params.project_id,
                    params.request_id,
                )
            if existing is None:
                # Not a replay: the cap filtered the insert out.
                raise ResourceExhausted(
                    f"project {params.project_id!r} already has {max_queued} queued runs, the "
                    f"limit set by {MAX_QUEUED_SETTING}; retry when some have started"
                )
            return RunRecord.from_row(existing), False, []
        run = RunRecord.from_row(row)
        stored = await append_run_events(
            conn, run, [events.RunQueued(agent_name=run.agent_name, run=run.snapshot())]
        )
        return run, True, stored

    async def get(self, project_id: str, run_id: str) -> RunRecord:
        """The run; :class:`NotFound` when it is not in the project."""
        return await read_run(self._pool, project_id, run_id)

    async def claim_next(self, owner: str, lease_s: float, *, limit: int = 1) -> list[RunRecord]:
        """Claims up to ``limit`` queued runs: ``running`` under ``owner``'s lease.

        Spans projects by design: one executor fleet serves every project, round robin
        (each project's oldest run, then each one's second, ...); a project past its cap of
        running top-level runs waits while others' runs are claimed.
        """
        rows = await self._pool.fetch(CLAIM, owner, lease_s, limit, self._max_running_per_project)
        return sorted((RunRecord.from_row(r) for r in rows), key=lambda r: r.created_at)

    async def claim(self, owner: str, lease_s: float, *, limit: int = 1) -> list[ClaimedRun]:
        """What a worker with ``limit`` free slots runs next, in one round trip: first runs
        whose lease expired, each with the lease owner it had (:data:`RESUME_LEASE_OWNER`
        for a resumed run), then queued ones in the slots left (as :meth:`claim_next`, owner
        None); each with its definition. Spans projects."""
        # Approval deadlines are enforced on the workers' claim tick (any executor).
        await expire_overdue_approvals(self._pool)
        rows = await self._pool.fetch(
            CLAIM_ANY, owner, lease_s, limit, self._max_running_per_project
        )
        return [
            ClaimedRun(
                run=RunRecord.from_row(r),
                previous_owner=r["previous_owner"],
                definition=claimed_definition(r),
            )
            for r in rows
        ]

    async def heartbeat(
        self, run_ids: Sequence[str], owner: str, lease_s: float
    ) -> HeartbeatResult:
        """Renews the leases ``owner`` still holds on ``run_ids`` in one statement."""
        if not run_ids:
            return HeartbeatResult(held=frozenset(), cancel_requested=frozenset())
        rows = await self._pool.fetch(
            """
            UPDATE kb.agent_runs
            SET lease_expires_at = now() + make_interval(secs => $3::double precision)
            WHERE id = ANY($1::uuid[]) AND lease_owner = $2 AND status = 'running'
            RETURNING id, cancel_requested_at
            """,
            list(run_ids),
            owner,
            lease_s,
        )
        return HeartbeatResult(
            held=frozenset(str(r["id"]) for r in rows),
            cancel_requested=frozenset(
                str(r["id"]) for r in rows if r["cancel_requested_at"] is not None
            ),
        )

    async def ended(self, run_ids: Sequence[str]) -> frozenset[str]:
        """Which of ``run_ids`` are no longer ``running`` (a heartbeat that did not renew
        them raced their end: they were not taken over)."""
        rows = await self._pool.fetch(
            "SELECT id FROM kb.agent_runs WHERE id = ANY($1::uuid[]) AND status <> 'running'",
            list(run_ids),
        )
        return frozenset(str(r["id"]) for r in rows)

    async def release(self, run_ids: Sequence[str], owner: str) -> int:
        """Ends ``owner``'s leases now (shutdown at a step boundary), so the runs can be taken
        over at once by crash recovery, and wakes the other workers. Returns how many it
        released."""
        if not run_ids:
            return 0
        async with self._pool.acquire() as conn, conn.transaction():
            result = await conn.execute(
                "UPDATE kb.agent_runs SET lease_expires_at = now() "
                "WHERE id = ANY($1::uuid[]) AND lease_owner = $2 AND status = 'running'",
                list(run_ids),
                owner,
            )
            released = int(result.split()[-1])
            if released:
                await notify(conn, QUEUED_CHANNEL, "released")
        return released

    @staticmethod
    async def finish(
        conn: asyncpg.Connection,
        run: RunRecord,
        *,
        status: RunStatus,
        summary: str | None = None,
        error_message: str | None = None,
        from_statuses: Sequence[RunStatus] = ("running",),
        output: dict[str, Any] | None = None,
    ) -> RunRecord | None:
        """Moves the run to ``status`` (sets completed_at and duration, drops the lease) if it
        is still in one of ``from_statuses``; None when the transition did not apply.
        ``output``: the structured final answer (None clears it)."""
        row = await conn.fetchrow(
            _FINISH,
            run.project_id,
            run.id,
            list(from_statuses),
            status,
            summary,
            error_message,
            output,
        )
        return RunRecord.from_row(row) if row is not None else None

    async def request_cancel(
        self, project_id: str, run_id: str, reason: str = DEFAULT_CANCEL_REASON
    ) -> RunRecord:
        """Records a cancel request; a queued or paused run ends ``cancelled`` at once.

        A run that already ended is returned unchanged. :class:`NotFound` if not in project.
        """
        async with self._pool.acquire() as conn, conn.transaction():
            row = await conn.fetchrow(
                """
                UPDATE kb.agent_runs
                SET cancel_requested_at = coalesce(cancel_requested_at, now())
                WHERE project_id = $1 AND id = $2::uuid
                  AND status IN ('queued', 'running', 'waiting', 'paused')
                RETURNING *
                """,
                project_id,
                run_id,
            )
            if row is None:
                return await self.get(project_id, run_id)
            run = RunRecord.from_row(row)
            if run.status == "running":
                payload = json.dumps({"run_id": run.id, "reason": reason})
                await notify(conn, CANCEL_CHANNEL, payload)
                return run
            previous = run.status
            # A waiting run's held calls get their answers (never executed) first.
            held = await answer_held_calls(
                conn, run.id, run.agent_name, f"not executed: the run was cancelled: {reason}"
            )
            finished = await self.finish(
                conn,
                run,
                status="cancelled",
                summary=run.summary,
                from_statuses=(previous,),
            )
            assert finished is not None  # the row is locked by the UPDATE above
            await append_run_events(
                conn,
                run,
                [
                    *held,
                    events.StatusChanged(
                        agent_name=run.agent_name,
                        from_status=previous,
                        to_status="cancelled",
                        reason=reason,
                    ),
                    events.RunFinished(agent_name=run.agent_name, run=finished.snapshot()),
                ],
            )
        return finished


async def read_run(
    conn: asyncpg.Pool | asyncpg.Connection, project_id: str, run_id: str, *, lock: bool = False
) -> RunRecord:
    """The run; :class:`NotFound` when it is not in the project. ``lock``: FOR UPDATE, in the
    caller's transaction."""
    row = await conn.fetchrow(
        "SELECT * FROM kb.agent_runs WHERE project_id = $1 AND id = $2::uuid"
        + (" FOR UPDATE" if lock else ""),
        project_id,
        run_id,
    )
    if row is None:
        raise NotFound(f"run {run_id} not found in project {project_id!r}")
    return RunRecord.from_row(row)


def parse_cancel_payload(payload: str) -> tuple[str, str]:
    """``(run_id, reason)`` of an ``agentfleet_run_cancel`` NOTIFY payload (a bare run id is
    accepted too, with the default reason)."""
    try:
        data = json.loads(payload)
    except ValueError:
        return payload.strip(), DEFAULT_CANCEL_REASON
    if isinstance(data, dict):
        return str(data.get("run_id", "")), str(data.get("reason") or DEFAULT_CANCEL_REASON)
    return str(data), DEFAULT_CANCEL_REASON
