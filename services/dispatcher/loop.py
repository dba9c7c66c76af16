"""The dispatch loop (DESIGN §9): wake on NOTIFY (tasks added or ready, run events) or a
short poll, settle finished runs, adopt expired leases, claim available tasks up to the free
slots, and start each attempt (session, prompt, TriggerRun) concurrently.

Runs are followed through their ``agent_runs`` rows, woken by the process's run watcher
(:meth:`agentfleet.runs.run_watch.RunWatch.follow`): a run this dispatcher follows that records
events (or every one, after a listener reconnect) is marked for one batched status read,
which also completes the tasks of completed runs in the same statement; the poll re-reads
all of them in case a wake-up was lost. A round's statements share one pooled connection, and
claims run only when something may have become claimable (a NOTIFY of ready or added
tasks, a freed slot, the poll), not on every run event.

Every task it starts belongs to its TaskGroup; attempt_start says which start errors end
what (a rejected credential pauses claiming and adoption).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import uuid
from collections.abc import Coroutine
from typing import Any

import asyncpg
import structlog
from opentelemetry import trace

from agentfleet.graph import TASKS_ADDED_CHANNEL, GraphObject
from agentfleet.observability import metrics
from agentfleet.observability.telemetry import current_trace_id
from agentfleet.postgres.db import Listener, Notification
from agentfleet.reconnect import rerun_rolled_back
from agentfleet.runs.run_watch import RunWatch
from services.dispatcher.attempt_start import AttemptStarter, CredentialPause
from services.dispatcher.evaluator import OutputEvaluator
from services.dispatcher.outcomes import AttemptOutcomes
from services.dispatcher.prompt import BlockerResult
from services.dispatcher.runs import CredentialRejected, RunControl, TriggerRefused
from services.dispatcher.selector import AgentInfo, NoAgent, Selector
from services.dispatcher.store import claims, dependents, sessions, transitions
from services.dispatcher.store.common import READY_CHANNEL
from services.dispatcher.store.transitions import Attempt
from services.dispatcher.timing import LoopTiming
from services.dispatcher.triage import FailureTriage

__all__ = ["DEFAULT_SLOTS", "Dispatcher"]

log = structlog.get_logger(__name__)
tracer = trace.get_tracer("agentfleet.dispatcher")

DEFAULT_SLOTS = 8


def owner_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class Dispatcher:
    """One dispatcher replica: holds at most ``slots`` tasks in flight."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        *,
        dsn: str,
        runs: RunControl,
        selector: Selector,
        slots: int = DEFAULT_SLOTS,
        timing: LoopTiming | None = None,
        owner: str | None = None,
        evaluator: OutputEvaluator | None = None,
        triage: FailureTriage | None = None,
    ) -> None:
        self._pool = pool
        self._dsn = dsn
        self.slots = slots
        self._timing = timing = timing or LoopTiming()
        self.owner = owner or owner_name()
        self._starter = AttemptStarter(
            pool=pool,
            runs=runs,
            selector=selector,
            owner=self.owner,
            retry=timing.trigger_retry,
            task_timeout_s=timing.task_timeout_s,
        )
        self._outcomes = AttemptOutcomes(
            pool=pool,
            runs=runs,
            evaluator=evaluator,
            triage=triage,
            backoff=timing.retry_backoff,
            max_resumes=timing.max_resumes,
        )
        self._credential = CredentialPause(timing.credential_pause)
        self._inflight: dict[str, Attempt] = {}  # task id -> attempt
        self._by_run: dict[str, Attempt] = {}  # followed through self._watch
        self._watch: RunWatch | None = None  # while run() dispatches
        self._dirty: set[str] = set()
        # Tasks whose completion left a dependent waiting: re-checked after their commit
        # (dependents.unblock), task id -> project id.
        self._unblock: dict[str, str] = {}
        self._sweep = dependents.SweepCursor()
        self._wake = asyncio.Event()
        self._new_tasks = True
        self._claim_due = True
        self._tasks: asyncio.TaskGroup | None = None
        self._starting: set[asyncio.Task[None]] = set()  # in _tasks; cancelled at stop

    # -- notifications (called in the event loop; never block) -------------------------

    def _on_run_change(self, run_id: str) -> None:
        self._dirty.add(run_id)
        self._wake.set()

    def _on_tasks(self, note: Notification) -> None:
        if note.channel == TASKS_ADDED_CHANNEL:
            self._new_tasks = True
        self._claim_due = True
        self._wake.set()

    # -- the loop ------------------------------------------------------------------------

    async def run(self, stopping: asyncio.Event) -> None:
        """Dispatches until ``stopping`` is set; then releases its leases for adoption."""
        listener = Listener(self._dsn)
        await listener.start()
        watch = self._watch = RunWatch(pool=self._pool, listener=listener, deltas=False)
        await watch.start()
        await listener.subscribe(TASKS_ADDED_CHANNEL, self._on_tasks)
        await listener.subscribe(READY_CHANNEL, self._on_tasks)
        listener.add_reconnect_callback(self._on_reconnect)
        try:
            async with asyncio.TaskGroup() as tasks:
                self._tasks = tasks
                tasks.create_task(self._heartbeat(stopping))
                tasks.create_task(self._wake_at_stop(stopping))
                await self._dispatch(stopping)
                for start in list(self._starting):
                    start.cancel()  # an attempt cut short is released below
        finally:
            self._tasks = None
            with contextlib.suppress(Exception):
                await claims.release(self._pool, owner=self.owner, task_ids=list(self._inflight))
            self._watch = None
            await watch.close()
            await listener.close()

    async def _dispatch(self, stopping: asyncio.Event) -> None:
        poll_due = True
        failed_rounds = 0
        while not stopping.is_set():
            try:
                await self.step(poll=poll_due)
                failed_rounds = 0
            except Exception:
                # The loop must outlive a bad round (database outage, odd row), at a pace
                # that slows while the failures last.
                first_s, max_s = self._timing.round_retry_s
                wait_s = min(first_s * 2**failed_rounds, max_s)
                failed_rounds += 1
                log.exception("dispatch step failed; retrying", retry_in_s=wait_s)
                await _wait_for(stopping, wait_s)
            poll_due = not await _wait_for(self._wake, self._timing.poll_s)
            self._wake.clear()

    async def _wake_at_stop(self, stopping: asyncio.Event) -> None:
        await stopping.wait()
        self._wake.set()

    def _on_reconnect(self) -> None:
        # The followed runs are woken by the run watcher's own reconnect rule.
        self._new_tasks = True
        self._claim_due = True
        self._wake.set()

    async def step(self, *, poll: bool) -> None:
        """One round: settle finished runs, re-check dependents a concurrent completion may
        have left waiting, (on the poll tick) sweep a page for them and adopt, classify new
        tasks, claim, start."""
        if poll:
            self._dirty.update(self._by_run)
            self._new_tasks = True
            self._claim_due = True
        dispatching = not self._credential.active
        # One connection for the round: each pooled statement would otherwise pay the pool's
        # acquire and its reset round trip.
        async with self._pool.acquire() as conn:
            if self._dirty:
                await self._settle(conn)
            if self._unblock:
                await self._recheck(conn)
            if poll:
                await self._sweep_waiting(conn)
            if poll and dispatching:
                for task in await claims.adopt_expired(
                    conn, owner=self.owner, lease_s=self._timing.lease_s, limit=self._free()
                ):
                    self._launch(task, str(task.properties["session_id"]), adopted=True)
            if self._new_tasks:
                self._new_tasks = False
                await claims.classify_new(conn)
            if self._claim_due and self._free() > 0 and dispatching:
                self._claim_due = False
                await self._claim(conn)

    async def _claim(self, conn: asyncpg.Connection) -> None:
        batch = await claims.claim_available(
            conn, owner=self.owner, lease_s=self._timing.lease_s, limit=self._free()
        )
        agents = await self._starter.agents_by_project([c.task for c in batch], conn)
        for claimed in batch:
            self._launch(
                claimed.task,
                claimed.session_id,
                adopted=False,
                blockers=claimed.blockers,
                agents=agents.get(claimed.task.project_id),
            )

    def _free(self) -> int:
        return self.slots - len(self._inflight)

    async def _heartbeat(self, stopping: asyncio.Event) -> None:
        while not await _wait_for(stopping, self._timing.lease_s / 3):
            with contextlib.suppress(asyncpg.PostgresError, OSError, asyncpg.InterfaceError):
                await claims.renew(
                    self._pool,
                    owner=self.owner,
                    lease_s=self._timing.lease_s,
                    task_ids=list(self._inflight),
                )

    # -- starting an attempt -------------------------------------------------------------

    def _launch(
        self,
        task: GraphObject,
        session_id: str,
        *,
        adopted: bool,
        blockers: list[BlockerResult] | None = None,
        agents: list[AgentInfo] | None = None,
    ) -> None:
        """Starts the attempt; ``blockers`` and ``agents`` when the claim already read them."""
        attempt = Attempt(
            project_id=task.project_id,
            task_id=task.id,
            graph_id=str(task.properties.get("graph_id")),
            session_id=session_id,
            key=str(task.properties.get("key", "")),
        )
        self._inflight[task.id] = attempt
        assert self._tasks is not None, "attempts start only while run() is dispatching"
        start = self._tasks.create_task(
            self._start(
                attempt,
                self._start_run(task, attempt, adopted=adopted, blockers=blockers, agents=agents),
            )
        )
        self._starting.add(start)
        start.add_done_callback(self._starting.discard)

    async def _start(self, attempt: Attempt, starting: Coroutine[Any, Any, None]) -> None:
        """Awaits ``starting`` (``_start_run``) or ends the attempt; no error leaves here (it
        would stop the TaskGroup and so the dispatcher), except cancellation."""
        try:
            try:
                await starting
            except NoAgent as exc:
                await self._end_failed(attempt, str(exc), retry=False)
            except TriggerRefused as exc:
                await self._end_failed(attempt, f"the executor refused the run: {exc}")
            except CredentialRejected as exc:
                # Not the task's fault: it goes back unchanged, for whoever holds a good token.
                self._credential.rejected(str(exc))
                self._forget(attempt)
                await claims.release(self._pool, owner=self.owner, task_ids=[attempt.task_id])
        except Exception:
            # Transient errors past their retries included: the task stays in progress and is
            # adopted (and triggered again, idempotently) once its lease expires.
            log.exception("starting a task failed; its lease will expire", task=attempt.task_id)
            self._forget(attempt)

    async def _start_run(
        self,
        task: GraphObject,
        attempt: Attempt,
        *,
        adopted: bool,
        blockers: list[BlockerResult] | None,
        agents: list[AgentInfo] | None,
    ) -> None:
        started = metrics.dispatch_started()
        # A fresh claim made a new session id, so only an adopted attempt can find one.
        existing = await self._starter.find_session(attempt) if adopted else None
        if existing is None:
            existing = await self._starter.create_session(task, attempt, blockers, agents)
        agent = str(existing.properties["agent_name"])
        prompt = str(existing.properties.get("input", ""))
        with tracer.start_as_current_span(
            "dispatch",
            attributes={
                "agentfleet.task_id": attempt.task_id,
                "agentfleet.task_key": attempt.key,
                "agentfleet.session_id": attempt.session_id,
                "agentfleet.agent_name": agent,
                "agentfleet.adopted": adopted,
            },
        ) as span:
            run_id = await self._starter.trigger(task, attempt, agent, prompt)
            metrics.record_dispatch(started)
            span.set_attribute("agentfleet.run_id", run_id)
            trace_id = current_trace_id()
        self._credential.accepted()
        attempt.run_id = run_id
        cancelled = await sessions.set_run(
            self._pool,
            attempt.project_id,
            attempt.session_id,
            run_id,
            trace_id,
            graph_id=attempt.graph_id,
            task_id=attempt.task_id,
        )
        self._by_run[run_id] = attempt
        assert self._watch is not None, "attempts start only while run() dispatches"
        self._watch.follow(run_id, self._on_run_change)
        # The run may have ended before it was followed: look once now.
        self._dirty.add(run_id)
        if cancelled:
            await self._outcomes.runs.cancel(attempt.project_id, run_id, "task graph cancelled")
        self._wake.set()

    # -- following runs to their end -----------------------------------------------------

    async def _settle(self, conn: asyncpg.Connection) -> None:
        dirty, self._dirty = self._dirty, set()
        # Without an evaluator a completed run's outcome is known: the settle statement
        # applies it; with one, the output is judged first (_finish).
        completes = self._outcomes.evaluator is None

        async def settle() -> transitions.Settled:
            # The completions and their conversations in the graph commit together (the
            # other outcomes record theirs in their own transaction): two round trips.
            async with conn.transaction():
                settled = await transitions.settle(
                    conn, [self._by_run[r] for r in dirty if r in self._by_run], complete=completes
                )
                completed = [
                    (self._by_run[row["id"]], row)
                    for row in settled.rows
                    if row["id"] in self._by_run and row["status"] == "completed" and completes
                ]
                await sessions.record_conversations(
                    conn, [(a.project_id, a.session_id, str(row["id"])) for a, row in completed]
                )
            return settled

        try:
            # It takes tasks, sessions and dependents that another transaction may take the
            # other way round: rolled back to break the deadlock, it runs again at once.
            settled = await rerun_rolled_back(settle)
        except BaseException:
            self._dirty |= dirty  # settled again next round: nothing of it committed
            raise
        for row in settled.rows:
            attempt = self._by_run.get(row["id"])
            if attempt is None:
                continue
            if row["status"] == "completed" and completes:
                if row["task_completed"] and row["recheck"]:
                    self._unblock[attempt.task_id] = attempt.project_id
                self._forget(attempt)
                continue
            if row["status"] == "paused" and row["resume_count"] < attempt.resumes:
                continue  # the resume asked for has not started yet
            await self._finish(attempt, row)

    async def _recheck(self, conn: asyncpg.Connection) -> None:
        """Readies the dependents a concurrent completion may have left waiting (issue 8);
        kept for the next round if the statement fails."""
        pending, self._unblock = self._unblock, {}
        try:
            readied = await dependents.unblock(
                conn, [(project, task) for task, project in pending.items()]
            )
        except BaseException:
            self._unblock.update(pending)
            raise
        if readied:
            log.info("readied dependents a concurrent completion left waiting", count=readied)
            self._claim_due = True

    async def _sweep_waiting(self, conn: asyncpg.Connection) -> None:
        """One bounded page of the backstop walk (dependents.sweep), on the poll tick only:
        the tick comes after a quiet poll interval, so a busy dispatcher rarely pays it."""
        readied, self._sweep = await dependents.sweep(conn, self._sweep)
        if readied:
            log.warning("readied tasks left waiting by an interrupted completion", count=readied)
            self._claim_due = True

    async def _finish(self, attempt: Attempt, row: asyncpg.Record) -> None:
        ended = await self._outcomes.finish(attempt, row)
        if ended.resumed:
            return
        if ended.recheck:
            # Re-checked by the step, now that the completing transaction has committed.
            self._unblock[attempt.task_id] = attempt.project_id
        self._forget(attempt)
        self._wake.set()

    async def _end_failed(self, attempt: Attempt, error: str, *, retry: bool = True) -> None:
        await self._outcomes.fail(attempt, error, retry=retry)
        self._forget(attempt)
        self._wake.set()

    def _forget(self, attempt: Attempt) -> None:
        self._claim_due = True  # a slot is free
        self._inflight.pop(attempt.task_id, None)
        if attempt.run_id is not None:
            self._by_run.pop(attempt.run_id, None)
            if self._watch is not None:
                self._watch.unfollow(attempt.run_id, self._on_run_change)


async def _wait_for(event: asyncio.Event, timeout_s: float) -> bool:
    """Waits until ``event`` is set or ``timeout_s`` passed; True when it is set."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout_s):
            await event.wait()
    return event.is_set()
