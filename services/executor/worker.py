"""The executor's run worker: claims queued runs and executes up to ``concurrency`` at once.

It wakes on ``NOTIFY agentfleet_runs_queued`` (with a short poll as the fallback for a
missed notification), renews the leases of its runs by heartbeat, and cancels a run it owns
when ``NOTIFY agentfleet_run_cancel`` names it (the heartbeat sees ``cancel_requested_at``
too, should the NOTIFY be missed). Every run task is owned by one TaskGroup.

Shutdown (the ``stopping`` event): stop claiming, let each run reach its next step boundary
(``RunControl.draining``), and after ``drain_s`` cancel what is left; released runs keep
status ``running`` with an expired lease, for crash recovery to take over.

A PostgreSQL restart or failover (or the toolpool away) fails no run: the run's writes are
retried (:class:`RunRecorder`), and an execution cut anyway (a read, or an outage longer
than the writes wait) is run again by this worker from what it recorded, once the database
answers -- for up to ``outage_s``, after which the run ends ``failed`` as usual. Claims and
heartbeats failing meanwhile log one warning per outage, not a traceback each; a lease that
expired during the outage is renewed by the next heartbeat if no other worker took it.

A run resumed while this worker's execution that paused it still winds down is claimed as a
new execution and begins once that one has ended (never dropped as a renewed lease); never
begun (shutdown, a lost lease), it goes back to ResumeRun's lease owner for the next worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import socket
import uuid
from dataclasses import dataclass, field
from typing import Protocol

import structlog

from agentfleet.postgres.db import Listener, Notification
from agentfleet.reconnect import (
    DISCONNECT_RETRY_S,
    database_outage,
    is_disconnect,
    retry_on_disconnect,
)
from services.executor.model.outages import is_outage
from services.executor.queue import (
    CANCEL_CHANNEL,
    QUEUED_CHANNEL,
    RESUME_LEASE_OWNER,
    ClaimedRun,
    RunQueue,
    parse_cancel_payload,
)
from services.executor.run_path.loop import RunControl
from services.executor.runs import RunRecord

log = structlog.get_logger(__name__)

DEFAULT_CONCURRENCY = 16


class RunExecutor(Protocol):
    async def execute(self, run: RunRecord, control: RunControl) -> RunRecord | None:
        """Runs a claimed run to its end (None when it was left running)."""
        ...


def worker_name() -> str:
    """A lease owner name unique to this process: host, pid and a random suffix."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass(kw_only=True, slots=True)
class _ActiveRun:
    run: RunRecord
    control: RunControl
    task: asyncio.Task[None] | None = None
    started: bool = False
    """The execution has begun: a task cancelled before its first step never runs its body
    (nor its ``finally``), which would leave the run in ``_active``, heartbeated forever;
    one still waiting :attr:`behind` its predecessor is not cut either (a cancel request
    ends it once it begins, as the loop records a cancellation)."""
    previous_owner: str | None = None
    """The lease owner the claim took the run from; a claim that never began executing
    hands the run back to it (``RESUME_LEASE_OWNER``: the next claimer knows it resumes)."""
    behind: _ActiveRun | None = None
    """This worker's previous execution of the run, still winding down (the run paused, its
    descendants being cancelled) when ResumeRun's claim came: this one begins after it."""


@dataclass(kw_only=True, slots=True)
class RunWorker:
    """Claims and executes runs; :meth:`run` is a ``ServiceParts.background`` loop."""

    queue: RunQueue
    executor: RunExecutor
    listener: Listener
    owner: str = field(default_factory=worker_name)
    concurrency: int = DEFAULT_CONCURRENCY
    lease_s: float = 30.0
    heartbeat_s: float = 10.0
    poll_s: float = 1.0
    """Fallback claim interval when no NOTIFY arrives."""
    drain_s: float = 10.0
    """At shutdown, how long runs get to reach a step boundary before they are cancelled."""
    outage_s: float = DISCONNECT_RETRY_S
    """How long a run cut by an outage is run again before its failure is recorded."""
    _active: dict[str, _ActiveRun] = field(default_factory=dict)
    _wake: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def active_run_ids(self) -> list[str]:
        return list(self._active)

    def control(self, run_id: str) -> RunControl | None:
        """What the worker tells the run's current execution here (None: none here)."""
        active = self._active.get(run_id)
        return active.control if active is not None else None

    async def run(self, stopping: asyncio.Event) -> None:
        """Claims and executes runs until ``stopping`` is set, then drains."""
        await self.listener.subscribe(QUEUED_CHANNEL, self._on_queued)
        await self.listener.subscribe(CANCEL_CHANNEL, self._on_cancel)
        self.listener.add_reconnect_callback(self._wake.set)
        log.info("run_worker_started", owner=self.owner, concurrency=self.concurrency)
        try:
            async with asyncio.TaskGroup() as group:
                heartbeat = group.create_task(self._heartbeat_loop(stopping))
                await self._claim_loop(group, stopping)
                await self._drain()
                heartbeat.cancel()
        finally:
            await self.listener.unsubscribe(QUEUED_CHANNEL, self._on_queued)
            await self.listener.unsubscribe(CANCEL_CHANNEL, self._on_cancel)
        log.info("run_worker_stopped", owner=self.owner)

    def cancel(self, run_id: str, reason: str) -> bool:
        """Cancels a run this worker executes: records the reason, then cancels its task."""
        active = self._active.get(run_id)
        if active is None or active.task is None:
            return False
        if active.control.cancel_reason is not None:
            # Already ending cancelled (the NOTIFY, then each heartbeat, name the same
            # request): one cancellation per run, or a second one would cut its last writes.
            return True
        active.control.cancel(reason)
        if active.started:
            active.task.cancel()
        # Not started yet: _execute sees the reason and cancels itself once inside.
        return True

    async def _claim_loop(self, group: asyncio.TaskGroup, stopping: asyncio.Event) -> None:
        stop_waiter = asyncio.ensure_future(stopping.wait())
        try:
            while not stopping.is_set():
                self._wake.clear()
                free = self.concurrency - len(self._active)
                claimed: list[ClaimedRun] = []
                if free > 0:
                    try:
                        claimed = await self._claim(free)
                    except Exception as exc:
                        if is_disconnect(exc):
                            database_outage.lost(exc, what="claiming runs")
                        else:
                            log.exception("claim_failed")
                    else:
                        database_outage.back()
                for claim in claimed:
                    self._start(group, claim)
                if claimed and len(claimed) == free:
                    continue  # maybe more waiting; claim again once a slot frees
                wake = asyncio.ensure_future(self._wake.wait())
                try:
                    await asyncio.wait(
                        [wake, stop_waiter], timeout=self.poll_s, return_when="FIRST_COMPLETED"
                    )
                finally:
                    wake.cancel()
        finally:
            stop_waiter.cancel()

    async def _claim(self, free: int) -> list[ClaimedRun]:
        """Runs to execute, at most ``free``: first those whose lease expired (crash
        recovery, released at shutdown, resumed), then queued ones."""
        taken: list[ClaimedRun] = []
        for claim in await self.queue.claim(self.owner, self.lease_s, limit=free):
            run, previous = claim.run, claim.previous_owner
            if run.id in self._active and previous == RESUME_LEASE_OWNER:
                # Resumed while our execution that paused it still winds down: a new
                # execution, begun once that one has ended (_start queues it behind).
                log.info("resume_queued_behind_ending_execution", run_id=run.id)
            elif run.id in self._active:
                # Our own run, whose lease expired while the database was away: the claim
                # renewed it; the execution under way goes on.
                log.info("lease_renewed_after_outage", run_id=run.id)
                continue
            elif previous is not None:
                log.info("run_taken_over", run_id=run.id, previous_owner=previous)
            taken.append(claim)
        return taken

    def _start(self, group: asyncio.TaskGroup, claim: ClaimedRun) -> None:
        run = claim.run
        control = RunControl(
            resumed=claim.previous_owner == RESUME_LEASE_OWNER,
            definition=claim.definition,
            never_started=claim.never_started,
        )
        # The run's entry is the newest execution's: heartbeats and cancel requests are for
        # it. The one it waits behind stays reachable (drain) through ``behind``.
        active = _ActiveRun(
            run=run,
            control=control,
            previous_owner=claim.previous_owner,
            behind=self._active.get(run.id),
        )
        self._active[run.id] = active
        active.task = group.create_task(self._execute(active), name=f"run-{run.id}")

    async def _execute(self, active: _ActiveRun) -> None:
        run = active.run
        still_ours = True
        try:
            if active.behind is not None and active.behind.task is not None:
                # Two executions of one run never overlap; the old one only winds down.
                await asyncio.wait([active.behind.task])
            active.behind = None
            if not active.control.draining:  # shutdown came while it waited: not begun
                active.started = True
                still_ours = await self._execute_through_outages(active)
        except asyncio.CancelledError:
            # Shutdown cut the run short: the run stays running for crash recovery.
            log.info("run_interrupted", run_id=run.id)
        except Exception:
            # The loop records its own failures; reaching here means it could not.
            log.exception("run_task_failed", run_id=run.id)
        finally:
            superseded = self._active.get(run.id) is not active
            if not superseded:
                self._active.pop(run.id)
            # Superseded: the lease is the queued execution's now, not to be released.
            if still_ours and not superseded:
                # Left running (drain, cut short, failed to record): hand it over at once. A
                # run that ended or moved on holds no lease of ours: no round trip for it.
                # Never begun: back to whom the claim took it from, as it was.
                hand_to = None if active.started else active.previous_owner
                with contextlib.suppress(Exception):
                    await asyncio.shield(self.queue.release([run.id], self.owner, hand_to=hand_to))
            self._wake.set()

    async def _execute_through_outages(self, active: _ActiveRun) -> bool:
        """Executes the run; an execution cut by an outage runs again from what it recorded
        once the database answers (its lease kept by the heartbeats), within ``outage_s``.
        False when the run no longer holds a lease of ours (it ended, or moved on)."""
        control = active.control
        deadline = asyncio.get_running_loop().time() + self.outage_s
        backoff_s = 0.2
        while True:
            control.retry_outages = asyncio.get_running_loop().time() < deadline
            if control.cancel_reason is not None:
                # Cancelled before this execution began (before the claim was started, or
                # while an outage cut the one that was ending it): its first await ends the
                # run cancelled. The worker cancels a task once per request (cancel()).
                asyncio.current_task().cancel()  # type: ignore[union-attr]
            try:
                return await self.executor.execute(active.run, control) is None
            except Exception as exc:
                if not (control.retry_outages and is_outage(exc)):
                    raise
                if is_disconnect(exc):
                    database_outage.lost(exc, what="running a run")
                else:
                    log.info("run_waits_for_toolpool", run_id=active.run.id, error=str(exc))
            # The toolpool answering UNAVAILABLE is not waited for below: back off a little.
            await asyncio.sleep(backoff_s)
            backoff_s = min(backoff_s * 2, 2.0)
            if self._active.get(active.run.id) is not active:
                # Resumed meanwhile (the cut execution had paused it): the lease this worker
                # holds is the queued execution's, which must not be run as this one.
                return False
            run = active.run
            try:
                current = await retry_on_disconnect(
                    functools.partial(self.queue.get, run.project_id, run.id),
                    what="reloading a run",
                    budget_s=max(0.0, deadline - asyncio.get_running_loop().time()),
                )
            except Exception as exc:
                if not is_disconnect(exc):
                    raise
                # Still away: the next execution records the failure.
                continue
            if current.status != "running" or current.lease_owner != self.owner:
                log.info("run_moved_on_during_outage", run_id=run.id, status=current.status)
                return False
            active.run = current
            # As before the claim carried it: each execution reads the definition afresh,
            # and its position (the cut execution may have recorded the start).
            control.definition = None
            control.never_started = False
            log.info("run_continued_after_outage", run_id=run.id)

    async def _heartbeat_loop(self, stopping: asyncio.Event) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_s)
            ids = list(self._active)
            try:
                result = await self.queue.heartbeat(ids, self.owner, self.lease_s)
            except Exception as exc:
                if is_disconnect(exc):
                    database_outage.lost(exc, what="renewing leases")
                else:
                    log.exception("heartbeat_failed", runs=len(ids))
                continue
            lost = [i for i in ids if i not in result.held and i in self._active]
            if lost:
                try:
                    lost = [i for i in lost if i not in await self.queue.ended(lost)]
                except Exception as exc:
                    if not is_disconnect(exc):
                        log.exception("heartbeat_failed", runs=len(lost))
                    continue  # decided at the next heartbeat
            for run_id in lost:
                if run_id in self._active:
                    log.warning("lease_lost", run_id=run_id)
                    self._cancel_task(run_id)
            for run_id in result.cancel_requested:
                self.cancel(run_id, "cancelled by user")

    def _cancel_task(self, run_id: str) -> None:
        active = self._active.get(run_id)
        if active is not None and active.task is not None:
            active.task.cancel()

    async def _drain(self) -> None:
        if not self._active:
            return
        log.info("draining", runs=len(self._active), drain_s=self.drain_s)
        # With the executions that resumed ones wait behind (at most one each).
        executions = list(self._active.values())
        executions += [a.behind for a in executions if a.behind is not None]
        for active in executions:
            active.control.draining = True
        tasks = [a.task for a in executions if a.task is not None]
        _done, pending = await asyncio.wait(tasks, timeout=self.drain_s)
        for task in pending:
            task.cancel()

    def _on_queued(self, _notification: Notification) -> None:
        self._wake.set()

    def _on_cancel(self, notification: Notification) -> None:
        run_id, reason = parse_cancel_payload(notification.payload)
        if run_id in self._active:
            self.cancel(run_id, reason)
