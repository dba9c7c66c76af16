"""The run queue: ``kb.agent_runs`` rows as the executor's work queue (DESIGN §4), over
:mod:`services.executor.store.runs`.

StartRun/TriggerRun :meth:`RunQueue.enqueue` a ``queued`` run (at most
``max_queued_per_project`` capped runs -- top-level or of a task -- queued per project) and
NOTIFY ``agentfleet_runs_queued``; workers :meth:`RunQueue.claim` runs round robin across
projects with ``FOR UPDATE SKIP LOCKED``, hold a lease renewed by
:meth:`RunQueue.heartbeat`, and end the run with a conditional :meth:`RunQueue.finish`.
Every status change is a conditional UPDATE that reports whether it applied, so two workers
(or a worker and a CancelRun) can never both move one run.

CancelRun is :meth:`RunQueue.request_cancel`: a queued, waiting or paused run is cancelled at
once (a waiting run's held tool calls are answered, never executed);
a running one gets ``cancel_requested_at`` and a NOTIFY on ``agentfleet_run_cancel``
(payload ``{"run_id": ..., "reason": ...}``) for whichever worker holds it. A remote child
paused for an answer is the exception: its remote task waits too, so it goes back to
``running`` under :data:`CANCEL_LEASE_OWNER` with its cancel request, and the execution that
claims it sends ``tasks/cancel`` before recording CANCELLED.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg

from agentfleet import events
from agentfleet.errors import ResourceExhausted
from agentfleet.postgres.db import lock_key, notify
from agentfleet.request_ids import check_same_request
from services.executor.approvals.approval_store import (
    SWEEP_BATCH,
    answer_held_calls,
    expire_overdue_approvals,
)
from services.executor.runs import RunRecord, StartRunParams, append_run_events
from services.executor.store import leases, run_reads, runs
from services.executor.store.caps import is_capped
from services.executor.store.claim_sql import ClaimedRun, claim_any, claim_queued
from services.executor.store.group_commit import GroupCommit
from services.executor.store.runs import QUEUED_CHANNEL, read_run

__all__ = [
    "CANCEL_CHANNEL",
    "CANCEL_LEASE_OWNER",
    "DEFAULT_CANCEL_REASON",
    "QUEUED_CHANNEL",
    "RESUME_LEASE_OWNER",
    "ClaimedRun",
    "HeartbeatResult",
    "RunQueue",
    "parse_cancel_payload",
]

CANCEL_CHANNEL = "agentfleet_run_cancel"
"""NOTIFY channel of cancel requests; payload: JSON ``{"run_id", "reason"}``."""
DEFAULT_CANCEL_REASON = "cancelled by user"

CANCEL_LEASE_OWNER = "cancel-requested"
"""lease_owner of a paused remote child handed back to ``running`` to cancel its remote task
(an expired lease, claimed at once)."""
RESUME_LEASE_OWNER = "resume-requested"
"""lease_owner of a run ResumeRun moved to ``running``: an expired lease that the next
worker claims at once, marking the execution as a resume rather than a recovery."""


@dataclass(frozen=True, kw_only=True, slots=True)
class HeartbeatResult:
    """What one heartbeat learned about the runs a worker holds."""

    held: frozenset[str]
    """Runs whose lease was renewed; any other run of the worker lost its lease."""
    cancel_requested: frozenset[str]
    """Held runs with a cancel request (the fallback for a missed NOTIFY)."""


APPROVAL_SWEEP_INTERVAL_S = 1.0
"""How often a worker's claims also apply overdue approval deadlines: a deadline takes
effect within about this long of passing (or the claim poll, if longer)."""

DEFAULT_MAX_RUNNING_PER_PROJECT = 64
DEFAULT_MAX_QUEUED_PER_PROJECT = 1000
MAX_QUEUED_SETTING = "AGENTFLEET_MAX_QUEUED_PER_PROJECT"
"""The setting named when a project's queue is full."""


class RunQueue:
    """Queue operations on ``kb.agent_runs``; one method per transition (a statement of
    :mod:`~services.executor.store.runs`, or a transaction of them)."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        *,
        max_running_per_project: int = DEFAULT_MAX_RUNNING_PER_PROJECT,
        max_queued_per_project: int = DEFAULT_MAX_QUEUED_PER_PROJECT,
        notifier: events.RunEventNotifier | None = None,
        group: GroupCommit | None = None,
    ) -> None:
        """``notifier``: the process's, which sends an enqueue's notifications once it has
        committed; None: one of this queue's own. ``group``: the process's group commit,
        which enqueues join; None: one of this queue's own."""
        self._pool = pool
        self._group = group or GroupCommit(pool)
        self._notifier = notifier or events.RunEventNotifier(pool)
        self._max_running_per_project = max_running_per_project
        self._max_queued_per_project = max_queued_per_project
        self._next_sweep = 0.0
        """When (``time.monotonic``) a claim next applies overdue approval deadlines."""

    async def enqueue(self, params: StartRunParams) -> tuple[RunRecord, bool]:
        """Inserts a ``queued`` run with its RUN_QUEUED event and NOTIFYs the workers.

        With a ``request_id`` seen before in the project, returns that run and False
        (:class:`InvalidArgument` naming ``request_id`` when that run was asked for
        otherwise, :func:`~agentfleet.request_ids.check_same_request`). A
        run that counts toward the caps (:func:`~services.executor.store.caps.is_capped`:
        top-level, or of a task) is refused with :class:`ResourceExhausted` when its project
        already has ``max_queued_per_project`` such runs queued; nothing is written then.
        """
        max_queued = self._max_queued_per_project if is_capped(params) else None
        if params.thread_id is None:
            # One statement, committed with other enqueues of this process (group commit).
            run = await runs.insert_queued(
                self._pool, params, max_queued=max_queued, notify=False, group=self._group
            )
            run, created, event_seq = await _inserted_or_replayed(
                self._pool, params, run, max_queued
            )
        else:
            async with self._pool.acquire() as conn, conn.transaction():
                # Orders a thread's runs: created_at is read under this lock, held to the
                # commit, so the runs of a thread are older in the order they commit
                # (store.runs._INSERT). Per thread, so other enqueues never wait on it.
                await lock_key(
                    conn, f"agentfleet.run-queue-thread:{params.project_id}:{params.thread_id}"
                )
                run, created, event_seq = await self.enqueue_in(
                    conn, params, max_queued=max_queued, notify=False
                )
        # Committed: wake the workers and the run's followers now, outside the transaction.
        # A NOTIFY in it would hold the cluster's notification lock through the commit's WAL
        # flush, and enqueues of every replica would commit one at a time (bench/
        # trigger_admission.py on durable PostgreSQL: most of its backends' time waited on
        # that lock). Lost (the process ends first), the workers' poll claims the run.
        if event_seq:
            self._notifier.wake(QUEUED_CHANNEL, run.id)
            self._notifier.committed(run.id, event_seq)
        return run, created

    @staticmethod
    async def enqueue_in(
        conn: asyncpg.Connection,
        params: StartRunParams,
        *,
        max_queued: int | None = None,
        notify: bool = True,
    ) -> tuple[RunRecord, bool, int]:
        """:meth:`enqueue` in the caller's transaction (spawn_agents writes its children and
        the parent's tool call together): the run, whether it is new, and the seq of its
        RUN_QUEUED (0 when it was not written, a replay).
        ``notify``: the workers' wake-up and the RUN_QUEUED notification are sent at commit;
        False: the caller sends them once committed.

        ``max_queued``: refuse (:class:`ResourceExhausted`) when the project has that many
        capped runs queued; None (children) checks nothing. With a cap, the caller commits
        (or rolls back) right after, since the project's counters stay locked until then."""
        run = await runs.insert_queued(conn, params, max_queued=max_queued, notify=notify)
        return await _inserted_or_replayed(conn, params, run, max_queued)

    async def get(self, project_id: str, run_id: str) -> RunRecord:
        """The run; :class:`NotFound` when it is not in the project."""
        return await read_run(self._pool, project_id, run_id)

    async def claim_next(self, owner: str, lease_s: float, *, limit: int = 1) -> list[RunRecord]:
        """Claims up to ``limit`` queued runs: ``running`` under ``owner``'s lease.

        Spans projects by design: one executor fleet serves every project, round robin
        (each project's oldest run, then each one's second, ...); a project past its cap of
        running capped runs waits while others' runs are claimed.
        """
        claimed = await claim_queued(
            self._pool, owner, lease_s, limit, self._max_running_per_project
        )
        return sorted(claimed, key=lambda r: r.created_at)

    async def claim(self, owner: str, lease_s: float, *, limit: int = 1) -> list[ClaimedRun]:
        """What a worker with ``limit`` free slots runs next, in one round trip: first runs
        whose lease expired, each with the lease owner it had (:data:`RESUME_LEASE_OWNER`
        for a resumed run), then queued ones in the slots left (as :meth:`claim_next`, owner
        None); each with its definition. Spans projects."""
        # Approval deadlines are enforced on the workers' claims (any executor), at most once
        # per APPROVAL_SWEEP_INTERVAL_S: a claim follows every queued run, so sweeping on each
        # one cost a statement per run under load. A full batch sweeps again on the next
        # claim: a project with a flood of overdue calls does not hold back others' deadlines.
        now = time.monotonic()
        if now >= self._next_sweep:
            full = await expire_overdue_approvals(self._pool) >= SWEEP_BATCH
            self._next_sweep = now if full else now + APPROVAL_SWEEP_INTERVAL_S
        return await claim_any(self._pool, owner, lease_s, limit, self._max_running_per_project)

    async def heartbeat(
        self, run_ids: Sequence[str], owner: str, lease_s: float
    ) -> HeartbeatResult:
        """Renews the leases ``owner`` still holds on ``run_ids`` in one statement."""
        if not run_ids:
            return HeartbeatResult(held=frozenset(), cancel_requested=frozenset())
        renewed = await leases.heartbeat(self._pool, run_ids, owner, lease_s)
        return HeartbeatResult(
            held=frozenset(run_id for run_id, _ in renewed),
            cancel_requested=frozenset(run_id for run_id, cancel in renewed if cancel),
        )

    async def ended(self, run_ids: Sequence[str]) -> frozenset[str]:
        """Which of ``run_ids`` are no longer ``running`` (a heartbeat that did not renew
        them raced their end: they were not taken over)."""
        return await run_reads.ended(self._pool, run_ids)

    async def release(
        self, run_ids: Sequence[str], owner: str, *, hand_to: str | None = None
    ) -> int:
        """Ends ``owner``'s leases now (shutdown at a step boundary), so the runs can be taken
        over at once by crash recovery, and wakes the other workers. Returns how many it
        released. ``hand_to``: the lease owner the runs are left under instead of ``owner``
        (a claim never executed gives a resumed run back as :data:`RESUME_LEASE_OWNER`)."""
        if not run_ids:
            return 0
        async with self._pool.acquire() as conn, conn.transaction():
            released = await leases.release(conn, run_ids, owner, hand_to=hand_to)
            if released:
                await notify(conn, QUEUED_CHANNEL, "released")
        return released

    async def request_cancel(
        self, project_id: str, run_id: str, reason: str = DEFAULT_CANCEL_REASON
    ) -> RunRecord:
        """Records a cancel request; a queued or paused run ends ``cancelled`` at once.

        A run that already ended is returned unchanged. :class:`NotFound` if not in project.
        """
        async with self._pool.acquire() as conn, conn.transaction():
            run = await runs.request_cancel(conn, project_id, run_id)
            if run is None:
                return await self.get(project_id, run_id)
            if run.status == "running":
                payload = json.dumps({"run_id": run.id, "reason": reason})
                await notify(conn, CANCEL_CHANNEL, payload)
                return run
            previous = run.status
            if previous == "paused" and (run.remote_agent or {}).get("task_id"):
                return await _hand_over_paused(conn, run, reason)
            # A waiting run's held calls get their answers (never executed) first.
            held = await answer_held_calls(
                conn, run, f"not executed: the run was cancelled: {reason}"
            )
            finished = await runs.finish(
                conn,
                run.project_id,
                run.id,
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


async def _hand_over_paused(conn: asyncpg.Connection, run: RunRecord, reason: str) -> RunRecord:
    """A paused remote child to ``running`` for the execution that cancels its remote task
    (see the module docstring); its cancel request stays set."""
    handed = await runs.hand_over_paused(
        conn, run.project_id, run.id, lease_owner=CANCEL_LEASE_OWNER, reason=reason[:500]
    )
    assert handed is not None  # the row is locked by request_cancel's UPDATE
    await append_run_events(
        conn,
        run,
        [
            events.StatusChanged(
                agent_name=run.agent_name,
                from_status="paused",
                to_status="running",
                reason=f"cancelling its remote task: {reason}"[:2000],
            )
        ],
    )
    await notify(conn, QUEUED_CHANNEL, run.id)
    return handed


def _queue_full(project_id: str, max_queued: int | None) -> ResourceExhausted:
    return ResourceExhausted(
        f"project {project_id!r} already has {max_queued} queued runs, the limit set by "
        f"{MAX_QUEUED_SETTING}; retry when some have started"
    )


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


async def _inserted_or_replayed(
    db: asyncpg.Pool | asyncpg.Connection,
    params: StartRunParams,
    run: RunRecord | None,
    max_queued: int | None,
) -> tuple[RunRecord, bool, int]:
    """What :func:`~services.executor.store.runs.insert_queued`'s answer means: the new run
    (RUN_QUEUED seq 1), the request's earlier run (a replay: nothing written), or the queue
    full (:class:`ResourceExhausted`)."""
    if run is not None:
        return run, True, 1
    existing = None
    if params.request_id is not None:
        existing = await runs.by_request_id(db, params.project_id, params.request_id)
    if existing is None:
        # Not a replay: the cap filtered the insert out.
        raise _queue_full(params.project_id, max_queued)
    # Read after the insert's conflict: a concurrent first request with the id has
    # committed by now, so the loser of that race is compared with it too.
    check_same_request(existing.request_fingerprint, params.request_fingerprint)
    return existing, False, 0
