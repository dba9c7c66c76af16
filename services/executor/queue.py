"""The run queue: ``kb.agent_runs`` rows as the executor's work queue (DESIGN §4).

StartRun/TriggerRun :meth:`RunQueue.enqueue` a ``queued`` run and NOTIFY
``agentfleet_runs_queued``; workers :meth:`RunQueue.claim_next` with ``FOR UPDATE SKIP
LOCKED`` on the partial queued index, hold a lease renewed by :meth:`RunQueue.heartbeat`,
and end the run with a conditional :meth:`RunQueue.finish`. Every status change is a
conditional UPDATE that reports whether it applied, so two workers (or a worker and a
CancelRun) can never both move one run.

CancelRun is :meth:`RunQueue.request_cancel`: a queued or paused run is cancelled at once;
a running one gets ``cancel_requested_at`` and a NOTIFY on ``agentfleet_run_cancel``
(payload ``{"run_id": ..., "reason": ...}``) for whichever worker holds it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg

from agentfleet import events
from agentfleet.db import notify
from agentfleet.errors import NotFound
from services.executor.runs import RunRecord, RunStatus, StartRunParams

QUEUED_CHANNEL = "agentfleet_runs_queued"
"""NOTIFY channel of newly queued runs; payload: the run id."""
CANCEL_CHANNEL = "agentfleet_run_cancel"
"""NOTIFY channel of cancel requests; payload: JSON ``{"run_id", "reason"}``."""
DEFAULT_CANCEL_REASON = "cancelled by user"

_INSERT = """
INSERT INTO kb.agent_runs (
    project_id, agent_definition_id, agent_name, input, labels, max_steps, timeout,
    request_id, task_id, trace_id, trace_parent, parent_run_id, root_run_id, depth, max_tokens)
VALUES ($1, $2::uuid, $3, $4, $5::jsonb, $6, make_interval(secs => $7::double precision),
        $8, $9::uuid, $10, $11, $12::uuid, $13::uuid, $14, $15)
ON CONFLICT (project_id, request_id) WHERE request_id IS NOT NULL DO NOTHING
RETURNING *
"""
# The insert with the workers' wake-up in the same round trip (NOTIFY is delivered at commit,
# so no worker looks before the run and its RUN_QUEUED event are visible).
_INSERT_AND_NOTIFY = f"""
WITH inserted AS ({_INSERT})
SELECT inserted.*, pg_notify('{QUEUED_CHANNEL}', inserted.id::text) FROM inserted
"""

# The inner SELECT walks agent_runs_queued_idx (partial, status = 'queued') oldest first;
# SKIP LOCKED lets concurrent claimers take disjoint runs instead of queueing on one row.
# MATERIALIZED: the locking SELECT runs exactly once. As a plain subquery the planner may
# rescan it (a nested loop's inner side), and each rescan skips to other rows: one claim
# for one run could then take several.
#
# Fairness: a project may have at most $4 top-level runs running, so one project's backlog
# cannot take every slot of the fleet. Among the oldest queued runs (a bounded window), each
# project's top-level runs are numbered and only those that fit under its cap are claimable;
# children (depth > 0) are exempt, since their parents hold slots while waiting for them.
# The running counts are not locked: concurrent claims may pass a cap by a few runs.
_CANDIDATES = """
running AS (
    SELECT project_id, count(*) AS n FROM kb.agent_runs
    WHERE status = 'running' AND depth = 0
    GROUP BY project_id
), window_ AS (
    SELECT id, project_id, depth,
           row_number() OVER (PARTITION BY project_id, depth > 0 ORDER BY created_at, id) AS rn
    FROM (
        SELECT id, project_id, depth, created_at FROM kb.agent_runs
        WHERE status = 'queued'
        ORDER BY created_at, id
        LIMIT 2000
    ) oldest
), candidates AS MATERIALIZED (
    SELECT w.id FROM window_ w LEFT JOIN running USING (project_id)
    WHERE w.depth > 0 OR coalesce(running.n, 0) + w.rn <= $4
)"""


def _claimable(limit: str) -> str:
    return f"""claimable AS MATERIALIZED (
    SELECT q.id FROM kb.agent_runs q
    WHERE q.status = 'queued' AND q.id IN (SELECT id FROM candidates)
    ORDER BY q.created_at, q.id
    LIMIT {limit}
    FOR UPDATE SKIP LOCKED
)"""


_START_CLAIMED = """
UPDATE kb.agent_runs r
SET status = 'running',
    started_at = coalesce(r.started_at, now()),
    lease_owner = $1,
    lease_expires_at = now() + make_interval(secs => $2::double precision)
FROM claimable
WHERE r.id = claimable.id"""

_CLAIM = f"""
WITH {_CANDIDATES}, {_claimable("$3")}
{_START_CLAIMED}
RETURNING r.*
"""

# What a worker with free slots runs, in one round trip. First crash recovery (DESIGN §4):
# running runs whose lease expired -- their worker died, or shut down and released them, or
# ResumeRun handed them over; `expired` walks agent_runs_running_lease_idx and
# previous_owner tells a resume from a recovery. Then, in the slots left, queued runs
# (_CLAIM's rows, same fairness), previous_owner NULL. The two UPDATEs touch disjoint rows
# (running vs queued); one statement, one snapshot.
_CLAIM_ANY = f"""
WITH expired AS MATERIALIZED (
    SELECT id, lease_owner AS previous_owner FROM kb.agent_runs
    WHERE status = 'running' AND lease_expires_at <= now()
    ORDER BY lease_expires_at, id
    LIMIT $3
    FOR UPDATE SKIP LOCKED
), {_CANDIDATES}, {_claimable("greatest(0, $3 - (SELECT count(*) FROM expired))")},
taken_over AS (
    UPDATE kb.agent_runs r
    SET lease_owner = $1,
        lease_expires_at = now() + make_interval(secs => $2::double precision)
    FROM expired
    WHERE r.id = expired.id
    RETURNING r.*, expired.previous_owner
), claimed AS ({_START_CLAIMED}
    RETURNING r.*, NULL::text AS previous_owner
)
SELECT * FROM taken_over UNION ALL SELECT * FROM claimed
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
    lease_expires_at = NULL
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


DEFAULT_MAX_RUNNING_PER_PROJECT = 64


class RunQueue:
    """Queue operations on ``kb.agent_runs``; one method per statement (or transaction)."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        *,
        hub: events.EventHub | None = None,
        max_running_per_project: int = DEFAULT_MAX_RUNNING_PER_PROJECT,
    ) -> None:
        self._pool = pool
        self._hub = hub
        self._max_running_per_project = max_running_per_project

    async def enqueue(self, params: StartRunParams) -> tuple[RunRecord, bool]:
        """Inserts a ``queued`` run with its RUN_QUEUED event and NOTIFYs the workers.

        With a ``request_id`` seen before in the project, returns that run and False.
        """
        async with self._pool.acquire() as conn, conn.transaction():
            run, created, stored = await self.enqueue_in(conn, params)
        self.publish(stored)
        return run, created

    @staticmethod
    async def enqueue_in(
        conn: asyncpg.Connection, params: StartRunParams
    ) -> tuple[RunRecord, bool, list[events.PersistedEvent]]:
        """:meth:`enqueue` in the caller's transaction (spawn_agents writes its children and
        the parent's tool call together); the caller publishes the events after commit."""
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
        )
        if row is None:
            existing = await conn.fetchrow(
                "SELECT * FROM kb.agent_runs WHERE project_id = $1 AND request_id = $2",
                params.project_id,
                params.request_id,
            )
            assert existing is not None  # the conflicting row is committed and kept
            return RunRecord.from_row(existing), False, []
        run = RunRecord.from_row(row)
        stored = await events.append_events(
            conn,
            project_id=run.project_id,
            run_id=run.id,
            root_run_id=run.root_run_id,
            events=[events.RunQueued(agent_name=run.agent_name, run=run.snapshot())],
        )
        return run, True, stored

    async def get(self, project_id: str, run_id: str) -> RunRecord:
        """The run; :class:`NotFound` when it is not in the project."""
        row = await self._pool.fetchrow(
            "SELECT * FROM kb.agent_runs WHERE project_id = $1 AND id = $2::uuid",
            project_id,
            run_id,
        )
        if row is None:
            raise NotFound(f"run {run_id} not found in project {project_id!r}")
        return RunRecord.from_row(row)

    async def claim_next(self, owner: str, lease_s: float, *, limit: int = 1) -> list[RunRecord]:
        """Claims up to ``limit`` of the oldest queued runs: ``running`` under ``owner``'s lease.

        Spans projects by design: one executor fleet serves every project; a project past
        its cap of running top-level runs waits while others' runs are claimed.
        """
        rows = await self._pool.fetch(_CLAIM, owner, lease_s, limit, self._max_running_per_project)
        return sorted((RunRecord.from_row(r) for r in rows), key=lambda r: r.created_at)

    async def claim(
        self, owner: str, lease_s: float, *, limit: int = 1
    ) -> list[tuple[RunRecord, str | None]]:
        """What a worker with ``limit`` free slots runs next, in one round trip: first runs
        whose lease expired, each with the lease owner it had (:data:`RESUME_LEASE_OWNER`
        for a resumed run), then queued ones in the slots left (as :meth:`claim_next`, owner
        None). Spans projects."""
        rows = await self._pool.fetch(
            _CLAIM_ANY, owner, lease_s, limit, self._max_running_per_project
        )
        return [(RunRecord.from_row(r), r["previous_owner"]) for r in rows]

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
    ) -> RunRecord | None:
        """Moves the run to ``status`` (sets completed_at and duration, drops the lease) if it
        is still in one of ``from_statuses``; None when the transition did not apply."""
        row = await conn.fetchrow(
            _FINISH,
            run.project_id,
            run.id,
            list(from_statuses),
            status,
            summary,
            error_message,
        )
        return RunRecord.from_row(row) if row is not None else None

    async def request_cancel(
        self, project_id: str, run_id: str, reason: str = DEFAULT_CANCEL_REASON
    ) -> RunRecord:
        """Records a cancel request; a queued or paused run ends ``cancelled`` at once.

        A run that already ended is returned unchanged. :class:`NotFound` if not in project.
        """
        stored: list[events.PersistedEvent] = []
        async with self._pool.acquire() as conn, conn.transaction():
            row = await conn.fetchrow(
                """
                UPDATE kb.agent_runs
                SET cancel_requested_at = coalesce(cancel_requested_at, now())
                WHERE project_id = $1 AND id = $2::uuid
                  AND status IN ('queued', 'running', 'paused')
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
            finished = await self.finish(
                conn,
                run,
                status="cancelled",
                summary=run.summary,
                from_statuses=(previous,),
            )
            assert finished is not None  # the row is locked by the UPDATE above
            stored = await events.append_events(
                conn,
                project_id=run.project_id,
                run_id=run.id,
                root_run_id=run.root_run_id,
                events=[
                    events.StatusChanged(
                        agent_name=run.agent_name,
                        from_status=previous,
                        to_status="cancelled",
                        reason=reason,
                    ),
                    events.RunFinished(agent_name=run.agent_name, run=finished.snapshot()),
                ],
            )
        self.publish(stored)
        return finished

    def publish(self, stored: Sequence[events.PersistedEvent]) -> None:
        """Hands committed events to in-process subscribers (StartRun streams)."""
        if self._hub is not None and stored:
            self._hub.publish(stored)


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
