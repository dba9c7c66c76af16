"""Child runs (DESIGN §7): started as ``queued`` runs any executor may claim, and waited for
by the parent without polling each one.

A batch of children is written in one transaction: every child run (with its RUN_QUEUED and
NOTIFY), their ids on the parent's tool call row (``child_run_ids``) and the parent's
CHILD_RUN_STARTED events. Each child's ``request_id`` is derived from the parent, the batch
key (the spawning tool call, or a flow position) and its index, so starting a batch again --
a parent recovered after a crash -- finds the same children instead of spawning new ones.

The wait is woken by the process's run watcher (:meth:`agentfleet.runs.run_watch.RunWatch.changes`)
when a child records events (a short poll only as the fallback for a missed notification);
as each child stops (terminal or ``paused``) the parent records CHILD_RUN_FINISHED and
refreshes its ``tokens_total_tree``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import asyncpg
import structlog

from agentfleet import events
from agentfleet.errors import AgentFleetError, FailedPrecondition, NotFound
from agentfleet.runs.run_watch import RunWatch
from services.executor.queue import RunQueue
from services.executor.registry.definitions import DefinitionRepository
from services.executor.registry.remote_agents import RemoteAgent, RemoteAgentRepository
from services.executor.run_path.resume import ResumeParams, resume_run
from services.executor.runs import (
    TERMINAL_STATUSES,
    RunRecord,
    StartRunParams,
    append_run_events,
)
from services.executor.safety import effective_timeout_s
from services.executor.store import event_reads, run_reads, runs, tool_calls

log = structlog.get_logger(__name__)

STOPPED_STATUSES = TERMINAL_STATUSES | {"paused"}
"""A child in one of these no longer runs: its parent stops waiting for it."""
FALLBACK_POLL_S = 2.0
"""How often a waiting parent re-reads its children without a NOTIFY (a lost one)."""
SUMMARY_EVENT_CHARS = 4000
"""CHILD_RUN_FINISHED carries at most this much of the child's summary."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ChildTask:
    """One child to run."""

    agent_name: str
    description: str = ""
    input: str = ""
    """The child's prompt (for a resumed child: extra input, "" = a plain "continue")."""
    timeout_s: float | None = None
    timeout_cap_s: float | None = None
    """At most this (a flow's time left): the child gets the lesser of it and its own
    timeout (``timeout_s``, else its definition's)."""
    resume_run_id: str | None = None
    """Continue this paused child of the parent instead of starting a new run."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ChildBatch:
    """Children a parent starts together."""

    parent: RunRecord
    key: str
    """Unique within the parent: the spawning tool_call_id, or a flow position."""
    tasks: Sequence[ChildTask]
    tool_call_id: str | None = None
    """The parent's tool call that records the children's ids (None for flows)."""
    max_tokens: int | None = None
    trace_parent: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class ChildRef:
    """A started (or re-attached) child of a batch."""

    index: int
    run_id: str
    agent_name: str
    description: str


@dataclass(frozen=True, kw_only=True, slots=True)
class ChildFailure:
    """A task of a batch that never became a run (unknown agent, bad resume)."""

    index: int
    agent_name: str
    description: str
    error: str


@dataclass(frozen=True, kw_only=True, slots=True)
class StartedBatch:
    children: list[ChildRef] = field(default_factory=list)
    failures: list[ChildFailure] = field(default_factory=list)
    reattached: bool = False
    """True when the batch had been started before (the parent was recovered)."""


def child_request_id(parent_id: str, key: str, index: int) -> str:
    """The idempotency key of a batch's index-th child."""
    return f"child:{parent_id}:{key}:{index}"


@dataclass(kw_only=True, slots=True)
class ChildRuns:
    """Starts child runs and waits for them; shared by every run of an executor."""

    pool: asyncpg.Pool
    queue: RunQueue
    definitions: DefinitionRepository
    watch: RunWatch | None = None
    """Wakes the wait when a child records events; without one (some tests) the wait
    polls every ``poll_s``."""
    poll_s: float = FALLBACK_POLL_S
    remote_agents: RemoteAgentRepository | None = None
    """The project's remote A2A agents: a task naming one (and no definition) is a remote
    child; None: only local agents can be spawned."""

    async def start(self, batch: ChildBatch) -> StartedBatch:
        """Starts (or finds again) the batch's children in one transaction."""
        failures: list[ChildFailure] = []
        params: list[tuple[int, ChildTask, StartRunParams]] = []
        resumed: list[tuple[int, ChildTask, RunRecord]] = []
        for index, task in enumerate(batch.tasks):
            try:
                if task.resume_run_id:
                    resumed.append((index, task, await self._resume(batch, index, task)))
                else:
                    params.append((index, task, await self._params(batch, index, task)))
            except AgentFleetError as exc:
                failures.append(
                    ChildFailure(
                        index=index,
                        agent_name=task.agent_name,
                        description=task.description,
                        error=str(exc) or exc.message,
                    )
                )
        while True:
            try:
                refs, reattached = await self._write(batch, params, resumed)
                break
            except _DefinitionGone as gone:
                # A child's definition was deleted after _params read it: its insert failed
                # the foreign key and aborted the batch's transaction. The batch is written
                # again without that child, which fails alone like an agent never there; a
                # savepoint per child would cost two round trips in every batch instead.
                params = [p for p in params if p[0] != gone.index]
                task = batch.tasks[gone.index]
                failures.append(
                    ChildFailure(
                        index=gone.index,
                        agent_name=task.agent_name,
                        description=task.description,
                        error=gone.error,
                    )
                )
        failures.sort(key=lambda f: f.index)
        log.info(
            "children_started",
            key=batch.key,
            children=len(refs),
            failures=len(failures),
            reattached=reattached,
        )
        return StartedBatch(children=refs, failures=failures, reattached=reattached)

    async def _write(
        self,
        batch: ChildBatch,
        params: Sequence[tuple[int, ChildTask, StartRunParams]],
        resumed: Sequence[tuple[int, ChildTask, RunRecord]],
    ) -> tuple[list[ChildRef], bool]:
        """The batch's transaction: its new children queued, every child's id on the
        parent's tool call, CHILD_RUN_STARTED. The refs by index, and whether the batch had
        been started before; :class:`_DefinitionGone` naming a child whose definition is
        gone (nothing is written then)."""
        parent = batch.parent
        refs: list[ChildRef] = []
        started_events: list[events.RunEvent] = []
        async with self.pool.acquire() as conn, conn.transaction():
            reattached = batch.tool_call_id is not None and await tool_calls.spawned(
                conn, parent.project_id, parent.id, batch.tool_call_id
            )
            for index, task, child_params in params:
                try:
                    child, created, _ = await RunQueue.enqueue_in(conn, child_params)
                except NotFound as exc:
                    raise _DefinitionGone(index, str(exc)) from exc
                reattached = reattached or not created
                refs.append(_ref(index, task, child.id))
                if created:
                    started_events.append(_started(parent, batch, task, child))
            for index, task, child in resumed:
                refs.append(_ref(index, task, child.id))
                started_events.append(_started(parent, batch, task, child))
            refs.sort(key=lambda r: r.index)
            if batch.tool_call_id is not None and refs:
                await tool_calls.set_child_ids(
                    conn,
                    parent.project_id,
                    parent.id,
                    batch.tool_call_id,
                    [r.run_id for r in refs],
                )
            if started_events and not reattached:
                await append_run_events(conn, parent, started_events)
        return refs, reattached

    async def wait(
        self,
        parent: RunRecord,
        children: Sequence[ChildRef],
        *,
        tool_call_id: str = "",
        done: dict[str, RunRecord] | None = None,
    ) -> dict[str, RunRecord]:
        """Waits until every child has stopped (terminal or paused); their final rows by id.
        Cancelling the wait leaves the children as they are (the caller decides); ``done``,
        if given, is filled as each child stops, so such a caller keeps what had ended."""
        pending = {c.run_id: c for c in children}
        done = {} if done is None else done
        changes = (
            self.watch.changes(list(pending))
            if self.watch is not None
            else contextlib.nullcontext(asyncio.Event())
        )
        with changes as signal:
            recorded = await event_reads.children_finished(self.pool, parent.id, list(pending))
            while pending:
                signal.clear()
                found = await run_reads.many(self.pool, parent.project_id, list(pending))
                stopped = [c for c in found if c.status in STOPPED_STATUSES]
                if stopped:
                    await self._record_stopped(
                        parent,
                        [(pending[c.id], c) for c in stopped if c.id not in recorded],
                        tool_call_id,
                    )
                    for child in stopped:
                        done[child.id] = child
                        del pending[child.id]
                if pending:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(signal.wait(), timeout=self.poll_s)
        return done

    async def _record_stopped(
        self,
        parent: RunRecord,
        stopped: Sequence[tuple[ChildRef, RunRecord]],
        tool_call_id: str,
    ) -> None:
        """CHILD_RUN_FINISHED for each child and the parent's refreshed tree tokens."""
        async with self.pool.acquire() as conn, conn.transaction():
            await runs.refresh_tree_tokens(conn, parent.project_id, parent.id)
            await append_run_events(
                conn,
                parent,
                [
                    events.ChildRunFinished(
                        **_child_fields(parent, child, ref.description, tool_call_id),
                        summary=(child.summary or "")[:SUMMARY_EVENT_CHARS],
                        error_message=child.error_message or "",
                    )
                    for ref, child in stopped
                ],
            )

    async def _params(self, batch: ChildBatch, index: int, task: ChildTask) -> StartRunParams:
        parent = batch.parent
        try:
            definition = await self.definitions.get(parent.project_id, task.agent_name)
        except NotFound:
            remote = await self._remote(parent.project_id, task.agent_name)
            if remote is None:
                raise
            return self._remote_params(batch, index, task, remote)
        return StartRunParams(
            project_id=parent.project_id,
            agent_name=definition.name,
            agent_definition_id=str(definition.id),
            input=task.input,
            timeout_s=_timeout_s(task, definition.default_timeout_s),
            request_id=child_request_id(parent.id, batch.key, index),
            trace_id=parent.trace_id,
            trace_parent=batch.trace_parent,
            parent_run_id=parent.id,
            root_run_id=parent.root_run_id,
            depth=parent.depth + 1,
            max_tokens=batch.max_tokens,
            labels={"spawned_by": parent.agent_name},
        )

    async def _remote(self, project_id: str, name: str) -> RemoteAgent | None:
        if self.remote_agents is None:
            return None
        return await self.remote_agents.find(project_id, name)

    def _remote_params(
        self, batch: ChildBatch, index: int, task: ChildTask, remote: RemoteAgent
    ) -> StartRunParams:
        """A remote child (:mod:`services.executor.remote_runs`): no definition; its row names
        the remote agent, its timeout is the spawn's, else the agent's."""
        parent = batch.parent
        return StartRunParams(
            project_id=parent.project_id,
            agent_name=remote.name,
            agent_definition_id=None,
            input=task.input,
            timeout_s=_timeout_s(task, remote.timeout_s) or remote.timeout_s,
            request_id=child_request_id(parent.id, batch.key, index),
            trace_id=parent.trace_id,
            trace_parent=batch.trace_parent,
            parent_run_id=parent.id,
            root_run_id=parent.root_run_id,
            depth=parent.depth + 1,
            max_tokens=batch.max_tokens,
            labels={"spawned_by": parent.agent_name, "remote_agent": remote.name},
            remote_agent={"name": remote.name, "card_url": remote.card_url},
        )

    async def _resume(self, batch: ChildBatch, index: int, task: ChildTask) -> RunRecord:
        """Resumes a paused child of this parent (idempotent per batch position)."""
        parent = batch.parent
        assert task.resume_run_id is not None
        child = await self.queue.get(parent.project_id, task.resume_run_id)
        if child.parent_run_id != parent.id:
            raise _NotYourChild(
                f"run {child.id} is not a child of this run: only a paused child of the "
                "caller can be resumed"
            )
        if child.agent_name != task.agent_name:
            raise _NotYourChild(
                f"run {child.id} is agent {child.agent_name!r}, not {task.agent_name!r}"
            )
        resumed = await resume_run(
            self.pool,
            ResumeParams(
                project_id=parent.project_id,
                run_id=child.id,
                input=task.input,
                timeout_s=await self._resumed_timeout_s(parent, task),
                max_tokens=batch.max_tokens,
                request_id=child_request_id(parent.id, batch.key, index),
            ),
        )
        return resumed.run

    async def _resumed_timeout_s(self, parent: RunRecord, task: ChildTask) -> float | None:
        if task.timeout_cap_s is None:
            return task.timeout_s  # None keeps the child's previous timeout
        definition = await self.definitions.get(parent.project_id, task.agent_name)
        return _timeout_s(task, definition.default_timeout_s)


def _timeout_s(task: ChildTask, definition_timeout_s: float | None) -> float | None:
    """The child's timeout: ``task.timeout_s`` (None: its definition's, applied when it
    runs), never past ``task.timeout_cap_s``."""
    if task.timeout_cap_s is None:
        return task.timeout_s
    own = effective_timeout_s(requested=task.timeout_s, definition=definition_timeout_s)
    return task.timeout_cap_s if own is None else min(own, task.timeout_cap_s)


class _NotYourChild(FailedPrecondition):
    """resume_run_id names a run the caller may not resume."""


class _DefinitionGone(Exception):
    """The index-th child's insert found its definition deleted; ``error`` says so."""

    def __init__(self, index: int, error: str) -> None:
        super().__init__(index, error)
        self.index = index
        self.error = error


def _ref(index: int, task: ChildTask, run_id: str) -> ChildRef:
    return ChildRef(
        index=index, run_id=run_id, agent_name=task.agent_name, description=task.description
    )


def _started(
    parent: RunRecord, batch: ChildBatch, task: ChildTask, child: RunRecord
) -> events.ChildRunStarted:
    return events.ChildRunStarted(
        **_child_fields(parent, child, task.description, batch.tool_call_id or "")
    )


def _child_fields(
    parent: RunRecord, child: RunRecord, description: str, tool_call_id: str
) -> dict[str, str]:
    """What CHILD_RUN_STARTED and CHILD_RUN_FINISHED both say about a child."""
    return {
        "agent_name": parent.agent_name,
        "child_run_id": child.id,
        "child_agent_name": child.agent_name,
        "status": child.status,
        "description": description,
        "tool_call_id": tool_call_id,
    }
