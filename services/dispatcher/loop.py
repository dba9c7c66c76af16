"""The dispatch loop (DESIGN §9): wake on NOTIFY (tasks added or ready, run events) or a
short poll, settle finished runs, adopt expired leases, claim available tasks up to the free
slots, and start each attempt (session, prompt, TriggerRun) concurrently.

Runs are followed through ``kb.agent_runs`` woken by ``NOTIFY agentfleet_run_events``: a
notification for a run this dispatcher follows marks it for one batched status read, which
also completes the tasks of completed runs in the same statement; the poll re-reads all of
them in case a notification was lost. A round's statements share one pooled connection, and
claims run only when something may have become claimable (a NOTIFY of ready or added
tasks, a freed slot, the poll), not on every run event.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import uuid
from dataclasses import dataclass, field

import asyncpg
import grpc
import structlog
from opentelemetry import trace

from agentfleet import events, metrics
from agentfleet.db import Listener, Notification
from agentfleet.graph import TASKS_ADDED_CHANNEL, GraphObject
from agentfleet.graph.task_properties import task_timeout_s, whole_number
from agentfleet.telemetry import current_trace_id
from services.dispatcher import claims, sessions, transitions
from services.dispatcher.evaluator import OutputEvaluator
from services.dispatcher.prompt import BlockerResult, build_prompt
from services.dispatcher.queries import READY_CHANNEL
from services.dispatcher.runs import RunControl, TriggerRefused
from services.dispatcher.selector import AgentInfo, NoAgent, Selector
from services.dispatcher.transitions import Attempt, RetryBackoff

__all__ = ["DEFAULT_SLOTS", "MAX_TOTAL_STEPS", "Dispatcher", "LoopTiming"]

log = structlog.get_logger(__name__)
tracer = trace.get_tracer("agentfleet.dispatcher")

DEFAULT_SLOTS = 8
MAX_TOTAL_STEPS = 500
SWEEP_PAGE = 200
"""Pending tasks looked at per poll tick by the backstop sweep (transitions.sweep)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LoopTiming:
    lease_s: float = 5.0
    poll_s: float = 1.0
    retry_backoff: RetryBackoff = field(default_factory=RetryBackoff)
    """Wait before a failed task's retry (doubling per retry, capped)."""


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
    ) -> None:
        self._pool = pool
        self._evaluator = evaluator
        self._dsn = dsn
        self._runs = runs
        self._selector = selector
        self.slots = slots
        self._timing = timing or LoopTiming()
        self.owner = owner or owner_name()
        self._inflight: dict[str, Attempt] = {}  # task id -> attempt
        self._by_run: dict[str, Attempt] = {}
        self._dirty: set[str] = set()
        # Tasks whose completion left a dependent waiting: re-checked after their commit
        # (transitions.unblock), task id -> project id.
        self._unblock: dict[str, str] = {}
        self._sweep = transitions.SweepCursor()
        self._wake = asyncio.Event()
        self._new_tasks = True
        self._claim_due = True
        self._starting: set[asyncio.Task[None]] = set()

    # -- notifications (called in the event loop; never block) -------------------------

    def _on_run_event(self, note: Notification) -> None:
        parsed = events.parse_notification(note.payload)
        if parsed is not None and parsed[0] in self._by_run:
            self._dirty.add(parsed[0])
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
        await listener.subscribe(events.CHANNEL, self._on_run_event)
        await listener.subscribe(TASKS_ADDED_CHANNEL, self._on_tasks)
        await listener.subscribe(READY_CHANNEL, self._on_tasks)
        listener.add_reconnect_callback(self._on_reconnect)
        heartbeat = asyncio.create_task(self._heartbeat(stopping))
        stop_wait = asyncio.create_task(stopping.wait())
        try:
            poll_due = True
            while not stopping.is_set():
                try:
                    await self.step(poll=poll_due)
                except Exception:
                    # The loop must outlive any one bad round (database blip, odd row).
                    log.exception("dispatch step failed; retrying")
                    await asyncio.sleep(0.2)
                if self._wake.is_set() or stopping.is_set():
                    self._wake.clear()
                    poll_due = False
                    continue
                wake = asyncio.create_task(self._wake.wait())
                done, _ = await asyncio.wait(
                    {wake, stop_wait},
                    timeout=self._timing.poll_s,
                    return_when=asyncio.FIRST_COMPLETED,
                )
                wake.cancel()
                poll_due = not done
                self._wake.clear()
        finally:
            stop_wait.cancel()
            heartbeat.cancel()
            for task in list(self._starting):
                task.cancel()
            await asyncio.gather(heartbeat, *self._starting, return_exceptions=True)
            with contextlib.suppress(Exception):
                await claims.release(self._pool, owner=self.owner, task_ids=list(self._inflight))
            await listener.close()

    def _on_reconnect(self) -> None:
        self._dirty.update(self._by_run)
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
        # One connection for the round: each pooled statement would otherwise pay the pool's
        # acquire and its reset round trip.
        async with self._pool.acquire() as conn:
            if self._dirty:
                await self._settle(conn)
            if self._unblock:
                await self._recheck(conn)
            if poll:
                await self._sweep_waiting(conn)
                for task in await claims.adopt_expired(
                    conn, owner=self.owner, lease_s=self._timing.lease_s, limit=self._free()
                ):
                    self._launch(task, str(task.properties["session_id"]), adopted=True)
            if self._new_tasks:
                self._new_tasks = False
                await claims.classify_new(conn)
            if self._claim_due and self._free() > 0:
                self._claim_due = False
                await self._claim(conn)

    async def _claim(self, conn: asyncpg.Connection) -> None:
        batch = await claims.claim_available(
            conn, owner=self.owner, lease_s=self._timing.lease_s, limit=self._free()
        )
        # The project's agents are read once per batch, not once per task.
        agents: dict[str, list[AgentInfo]] = {}
        for claimed in batch:
            project = claimed.task.project_id
            if project not in agents and not claimed.task.properties.get("assigned_agent"):
                agents[project] = await self._selector.agents(project, conn=conn)
        for claimed in batch:
            self._launch(
                claimed.task,
                claimed.session_id,
                adopted=False,
                blockers=claimed.blockers,
                agents=agents.get(claimed.task.project_id),
            )

    @property
    def _backoff(self) -> RetryBackoff:
        return self._timing.retry_backoff

    def _free(self) -> int:
        return self.slots - len(self._inflight)

    async def _heartbeat(self, stopping: asyncio.Event) -> None:
        while not stopping.is_set():
            await asyncio.sleep(self._timing.lease_s / 3)
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
        job = asyncio.create_task(
            self._start(task, attempt, adopted=adopted, blockers=blockers, agents=agents)
        )
        self._starting.add(job)
        job.add_done_callback(self._starting.discard)

    async def _start(
        self,
        task: GraphObject,
        attempt: Attempt,
        *,
        adopted: bool,
        blockers: list[BlockerResult] | None,
        agents: list[AgentInfo] | None,
    ) -> None:
        started = metrics.dispatch_started()
        try:
            # A fresh claim made a new session id, so only an adopted attempt can find one.
            existing = await self._session(attempt) if adopted else None
            if existing is None:
                existing = await self._create_session(task, attempt, blockers, agents)
                if existing is None:
                    return
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
                run_id = await self._trigger(task, attempt, agent, prompt)
                metrics.record_dispatch(started)
                span.set_attribute("agentfleet.run_id", run_id)
                trace_id = current_trace_id()
            attempt.run_id = run_id
            cancelled = await sessions.set_run(
                self._pool,
                attempt.project_id,
                attempt.session_id,
                run_id,
                trace_id,
                graph_id=attempt.graph_id,
            )
            self._by_run[run_id] = attempt
            # The run may have ended before it was mapped: look once now.
            self._dirty.add(run_id)
            if cancelled:
                await self._runs.cancel(attempt.project_id, run_id, "task graph cancelled")
            self._wake.set()
        except TriggerRefused as exc:
            await self._end_failed(attempt, f"the executor refused the run: {exc}")
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("starting a task failed; its lease will expire", task=attempt.task_id)
            self._forget(attempt)

    async def _session(self, attempt: Attempt) -> GraphObject | None:
        row = await self._pool.fetchrow(
            f"SELECT {sessions.OBJECT_COLUMNS} FROM kb.graph_objects "
            "WHERE project_id = $1 AND id = $2",
            attempt.project_id,
            uuid.UUID(attempt.session_id),
        )
        return GraphObject.from_row(row) if row is not None else None

    async def _create_session(
        self,
        task: GraphObject,
        attempt: Attempt,
        blockers: list[BlockerResult] | None,
        agents: list[AgentInfo] | None,
    ) -> GraphObject | None:
        p = task.properties
        try:
            choice = await self._selector.select(attempt.project_id, p, agents=agents)
        except NoAgent as exc:
            await self._end_failed(attempt, str(exc), retry=False)
            return None
        if blockers is None:
            blockers = await sessions.completed_blockers(self._pool, attempt.project_id, task.id)
        previous = p.get("previous_session_id")
        prompt = build_prompt(
            title=str(p.get("title", "")),
            description=str(p.get("description", "")),
            context=p.get("context"),
            blockers=blockers,
            previous_error=str(p["error_message"]) if previous and p.get("error_message") else None,
            feedback=p.get("feedback"),
        )
        return await sessions.create_session(
            self._pool,
            attempt.project_id,
            session_id=attempt.session_id,
            task=task,
            attempt=whole_number(p.get("attempts"), 1, 2**31 - 1) or 1,
            choice=choice,
            prompt=prompt,
            follows_up=str(previous) if previous else None,
            informed_by=[b.session_id for b in blockers if b.session_id],
            dispatcher=self.owner,
        )

    async def _trigger(self, task: GraphObject, attempt: Attempt, agent: str, prompt: str) -> str:
        """TriggerRun with request_id = session id (idempotent: an adopter gets the same
        run); transient errors are retried with backoff."""
        delay = 0.1
        while True:
            try:
                return await self._runs.trigger(
                    project_id=attempt.project_id,
                    agent_name=agent,
                    input=prompt,
                    request_id=attempt.session_id,
                    task_id=attempt.task_id,
                    timeout_s=task_timeout_s(task.properties),
                )
            except grpc.aio.AioRpcError as exc:
                log.warning("TriggerRun failed; retrying", code=exc.code().name, delay_s=delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    # -- following runs to their end -----------------------------------------------------

    async def _settle(self, conn: asyncpg.Connection) -> None:
        dirty, self._dirty = self._dirty, set()
        # Without an evaluator a completed run's outcome is known: the settle statement
        # applies it; with one, the output is judged first (_finish).
        completes = self._evaluator is None
        settled = await transitions.settle(
            conn, [self._by_run[r] for r in dirty if r in self._by_run], complete=completes
        )
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
            readied = await transitions.unblock(
                conn, [(project, task) for task, project in pending.items()]
            )
        except BaseException:
            self._unblock.update(pending)
            raise
        if readied:
            log.info("readied dependents a concurrent completion left waiting", count=readied)
            self._claim_due = True

    async def _sweep_waiting(self, conn: asyncpg.Connection) -> None:
        """One bounded page of the backstop walk (transitions.sweep), on the poll tick only:
        the tick comes after a quiet poll interval, so a busy dispatcher rarely pays it."""
        readied, self._sweep = await transitions.sweep(conn, self._sweep, limit=SWEEP_PAGE)
        if readied:
            log.warning("readied tasks left waiting by an interrupted completion", count=readied)
            self._claim_due = True

    async def _finish(self, attempt: Attempt, row: asyncpg.Record) -> None:
        status = row["status"]
        if status == "paused" and await self._resume(attempt, row):
            return
        rejection = await self._rejection(attempt, row) if status == "completed" else None
        async with self._pool.acquire() as conn, conn.transaction():
            if rejection is not None:
                await transitions.fail(conn, attempt, error=rejection, backoff=self._backoff)
            elif status == "completed":
                completion = await transitions.complete(conn, attempt, summary=row["summary"])
                if completion.done and completion.recheck:
                    # Re-checked by the step once this transaction has committed.
                    self._unblock[attempt.task_id] = attempt.project_id
            elif status == "paused":
                await transitions.pause(conn, attempt, summary=row["summary"])
            elif await transitions.graph_cancelled(conn, attempt):
                await transitions.cancel(conn, attempt, summary=row["summary"])
            elif status == "cancelled":
                await transitions.fail(
                    conn, attempt, error=f"run cancelled: {row['summary']}", backoff=self._backoff
                )
            else:
                error = row["error_message"] or "run failed"
                await transitions.fail(conn, attempt, error=error, backoff=self._backoff)
        self._forget(attempt)
        self._wake.set()

    async def _rejection(self, attempt: Attempt, row: asyncpg.Record) -> str | None:
        """The evaluator's feedback when it sends a completed output back for a retry.

        With no retry left the output stands: a task is never failed for its evaluation.
        """
        if self._evaluator is None:
            return None
        task = await self._pool.fetchrow(
            f"""SELECT properties ->> 'title' AS title,
                      coalesce(properties ->> 'description', '') AS description,
                      {transitions.RETRY_COUNT} < {transitions.MAX_RETRIES} AS can_retry
               FROM kb.graph_objects WHERE project_id = $1 AND id = $2::uuid""",
            attempt.project_id,
            attempt.task_id,
        )
        if task is None or not task["can_retry"]:
            return None
        verdict = await self._evaluator.evaluate(
            title=task["title"] or attempt.key,
            description=task["description"],
            output=row["summary"],
        )
        if verdict.accept:
            return None
        return f"the output was not accepted by the evaluator: {verdict.feedback}"

    async def _resume(self, attempt: Attempt, row: asyncpg.Record) -> bool:
        """ResumeRun while the 500-step cap allows; False when the task must end PAUSED."""
        if row["total_steps"] >= MAX_TOTAL_STEPS or attempt.run_id is None:
            return False
        if await transitions.graph_cancelled(self._pool, attempt):
            return False
        why_not = await self._runs.resume(
            attempt.project_id, attempt.run_id, f"{attempt.session_id}:resume:{attempt.resumes + 1}"
        )
        if why_not is not None:
            log.info("cannot resume paused run", run_id=attempt.run_id, reason=why_not)
            return False
        attempt.resumes += 1
        async with self._pool.acquire() as conn:
            await sessions.finish_session(
                conn,
                attempt.project_id,
                attempt.session_id,
                outcome="in_progress",
                final=False,
                resumed=True,
            )
        return True

    async def _end_failed(self, attempt: Attempt, error: str, *, retry: bool = True) -> None:
        async with self._pool.acquire() as conn, conn.transaction():
            if not retry:
                await conn.execute(
                    "UPDATE kb.graph_objects SET properties = properties || "
                    f"jsonb_build_object('retry_count', {transitions.MAX_RETRIES}) "
                    "WHERE project_id = $1 AND id = $2",
                    attempt.project_id,
                    uuid.UUID(attempt.task_id),
                )
            await transitions.fail(conn, attempt, error=error, backoff=self._backoff)
        self._forget(attempt)
        self._wake.set()

    def _forget(self, attempt: Attempt) -> None:
        self._claim_due = True  # a slot is free
        self._inflight.pop(attempt.task_id, None)
        if attempt.run_id is not None:
            self._by_run.pop(attempt.run_id, None)
