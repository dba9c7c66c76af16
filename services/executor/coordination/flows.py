"""Flow runs (DESIGN §7): ``sequential``, ``loop`` and ``parallel`` definitions run their
``sub_agents`` as child runs. A flow run makes no model call of its own.

- sequential: members in order; each one's output is the next one's input; the last
  output is the summary.
- loop: the sequence again and again until a member calls ``exit_loop`` or after
  ``max_iterations`` passes (default 10).
- parallel: every member at once on the same input; the summary joins their outputs.

A member that does not complete fails a sequential or loop flow (naming the member); a
parallel flow completes while at least one member did. Children are keyed by their
position (iteration, index), so a flow recovered after a crash finds its children again.

A flow's timeout (DESIGN §6) bounds its members: each gets at most the time left, so at the
deadline the member running then summarizes and pauses, and the flow ends ``paused`` with
that partial output. Resuming the flow resumes its paused members where they stopped. The
flow's progress (the last member's output) is its summary if it is cancelled.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg
from opentelemetry import trace

from agentfleet import events
from agentfleet.run_limits import MAX_SPAWN_DEPTH, may_spawn
from services.executor.control import StopRun
from services.executor.coordination.children import ChildBatch, ChildRef, ChildRuns, ChildTask
from services.executor.coordination.coordination import current_trace_parent
from services.executor.loop_state import Progress
from services.executor.registry.definitions import DEFAULT_MAX_ITERATIONS, AgentDefinition
from services.executor.runs import RunRecord
from services.executor.store import tool_calls

_tracer = trace.get_tracer("agentfleet.executor")


@dataclass(frozen=True, slots=True)
class FlowDeadline:
    """When a flow's execution reaches its timeout (event loop time)."""

    timeout_s: float
    at: float

    @classmethod
    def after(cls, timeout_s: float) -> FlowDeadline:
        return cls(timeout_s, asyncio.get_running_loop().time() + timeout_s)

    def left_s(self) -> float:
        return self.at - asyncio.get_running_loop().time()


@dataclass(kw_only=True, slots=True)
class FlowRunner:
    """Runs the members of flow definitions as child runs."""

    pool: asyncpg.Pool
    children: ChildRuns

    async def run(
        self,
        run: RunRecord,
        definition: AgentDefinition,
        progress: Progress,
        deadline: FlowDeadline | None = None,
    ) -> StopRun:
        """Runs the flow to its end (cancellation propagates to the caller, with the output
        so far in ``progress.last_text``)."""
        flow = definition.flow_type
        if not definition.sub_agents:
            return _failed(f"{flow} flow {definition.name!r} has no sub_agents")
        if not may_spawn(run.depth):
            return _failed(
                f"{flow} flow at depth {run.depth} cannot start its members: runs at depth "
                f"{MAX_SPAWN_DEPTH} cannot spawn"
            )
        member_runs = _Members(self.children, run, deadline)
        if flow == "parallel":
            return await member_runs.parallel(definition.sub_agents, progress)
        passes = (definition.max_iterations or DEFAULT_MAX_ITERATIONS) if flow == "loop" else 1
        text = run.input
        for iteration in range(passes):
            for index, member in enumerate(definition.sub_agents):
                if deadline is not None and deadline.left_s() <= 0:
                    return _timed_out(run, deadline, text)
                try:
                    child = await member_runs.one(f"flow:{iteration}:{index}", member, text)
                except _MemberError as exc:
                    return _failed(f"member {member!r} could not start: {exc}", summary=text)
                if member_runs.timed_out(child):
                    assert deadline is not None
                    return _timed_out(run, deadline, child.summary or text)
                if child.status != "completed":
                    why = _why(child)
                    return _failed(
                        f"member {member!r} (run {child.id}) ended {child.status}"
                        + (f": {why}" if why else ""),
                        summary=child.summary or text,
                    )
                text = progress.last_text = child.summary or ""
                if flow == "loop" and await self._exited_loop(child):
                    return StopRun(
                        status="completed",
                        reason=f"exit_loop called by {member} in pass {iteration + 1}",
                        summary=text,
                    )
        if flow == "loop":
            return StopRun(
                status="completed", reason=f"max_iterations ({passes}) reached", summary=text
            )
        return StopRun(status="completed", reason="sequence completed", summary=text)

    async def _exited_loop(self, child: RunRecord) -> bool:
        return await tool_calls.exited_loop(self.pool, child.project_id, child.id)


@dataclass(slots=True)
class _Members:
    """The member runs of one execution of a flow run."""

    children: ChildRuns
    run: RunRecord
    deadline: FlowDeadline | None

    async def one(self, key: str, member: str, text: str) -> RunRecord:
        """The member at ``key`` run to its end (found again after a crash, and resumed if
        an earlier execution of the flow left it paused)."""
        with _tracer.start_as_current_span(f"flow_member {member}"):
            (ref,), found = await self._start(
                key, [ChildTask(agent_name=member, description=key, input=text)]
            )
        child = (await self.children.wait(self.run, [ref]))[ref.run_id]
        if child.status != "paused" or not found or not self._time_left():
            return child
        task = ChildTask(agent_name=member, description=key, resume_run_id=child.id)
        (ref,), _ = await self._start(self._resume_key(key), [task])
        return (await self.children.wait(self.run, [ref]))[ref.run_id]

    async def parallel(self, members: Sequence[str], progress: Progress) -> StopRun:
        run = self.run
        with _tracer.start_as_current_span("flow_parallel"):
            batch = await self.children.start(
                self._batch(
                    "flow:parallel",
                    [ChildTask(agent_name=m, description=m, input=run.input) for m in members],
                )
            )
        failures = [f"{f.agent_name}: {f.error}" for f in batch.failures]
        finished = await self._wait_all(batch.children, progress)
        paused = [
            ChildTask(agent_name=ref.agent_name, description=ref.description, resume_run_id=c.id)
            for ref in batch.children
            if (c := finished[ref.run_id]).status == "paused"
            and batch.reattached
            and self._time_left()
        ]
        if paused:
            resumed = await self.children.start(
                self._batch(self._resume_key("flow:parallel"), paused)
            )
            failures += [f"{f.agent_name}: {f.error}" for f in resumed.failures]
            finished.update(await self._wait_all(resumed.children, progress))
        parts, timed_out = [], False
        for ref in batch.children:
            child = finished[ref.run_id]
            if child.status == "completed":
                parts.append(f"## {ref.agent_name}\n{child.summary or ''}")
            elif self.timed_out(child):
                timed_out = True
                parts.append(f"## {ref.agent_name} (paused at the timeout)\n{child.summary or ''}")
            else:
                failures.append(f"{ref.agent_name}: ended {child.status} {_why(child)}".strip())
        if not parts:
            return _failed("every member failed: " + "; ".join(failures))
        completed = sum(finished[r.run_id].status == "completed" for r in batch.children)
        if failures:
            parts.append("## failed members\n" + "\n".join(failures))
        if timed_out:
            assert self.deadline is not None
            return _timed_out(run, self.deadline, "\n\n".join(parts))
        return StopRun(
            status="completed",
            reason=f"{completed} of {len(members)} members completed",
            summary="\n\n".join(parts),
        )

    def timed_out(self, child: RunRecord) -> bool:
        """The member paused because the flow's time ran out (its timeout was the time
        left, so its deadline is the flow's or later)."""
        return (
            child.status == "paused" and self.deadline is not None and self.deadline.left_s() <= 0
        )

    def _time_left(self) -> bool:
        """Whether a member an earlier execution left paused may be continued now."""
        return self.deadline is None or self.deadline.left_s() > 0

    def _resume_key(self, key: str) -> str:
        # Each execution of the flow resumes its members once: the key (their ResumeRun
        # request ids) names the execution.
        return f"{key}:resume:{self.run.resume_count}"

    async def _start(self, key: str, tasks: list[ChildTask]) -> tuple[list[ChildRef], bool]:
        """The batch's children, and whether an earlier execution had started them."""
        started = await self.children.start(self._batch(key, tasks))
        if started.failures:
            raise _MemberError(started.failures[0].error)
        return started.children, started.reattached

    def _batch(self, key: str, tasks: list[ChildTask]) -> ChildBatch:
        left = None if self.deadline is None else max(0.001, self.deadline.left_s())
        return ChildBatch(
            parent=self.run,
            key=key,
            tasks=[_capped(t, left) for t in tasks],
            trace_parent=current_trace_parent(),
        )

    async def _wait_all(self, refs: Sequence[ChildRef], progress: Progress) -> dict[str, RunRecord]:
        done: dict[str, RunRecord] = {}
        try:
            return await self.children.wait(self.run, refs, done=done)
        finally:
            # Cancelled: the members that had completed are the flow's partial output.
            progress.last_text = "\n\n".join(
                f"## {ref.agent_name}\n{done[ref.run_id].summary or ''}"
                for ref in refs
                if ref.run_id in done and done[ref.run_id].status == "completed"
            )


def _capped(task: ChildTask, left_s: float | None) -> ChildTask:
    if left_s is None:
        return task
    return ChildTask(
        agent_name=task.agent_name,
        description=task.description,
        input=task.input,
        timeout_s=task.timeout_s,
        timeout_cap_s=left_s,
        resume_run_id=task.resume_run_id,
    )


class _MemberError(Exception):
    """A member could not be started (its definition is gone)."""


def _why(child: RunRecord) -> str:
    """Why a member did not complete: its error; for a remote member paused because its
    remote agent asks for input, that question (its summary): a flow has no model to answer
    it, so the flow ends saying what was asked."""
    if child.status == "paused" and child.remote_agent is not None:
        return (child.summary or "")[:2000]
    return child.error_message or ""


def _failed(message: str, *, summary: str | None = None) -> StopRun:
    return StopRun(status="failed", reason="flow failed", summary=summary, error_message=message)


def _timed_out(run: RunRecord, deadline: FlowDeadline, summary: str) -> StopRun:
    message = f"timeout of {deadline.timeout_s:g}s reached: the flow paused with its output so far"
    return StopRun(
        status="paused",
        reason=f"timeout: {message}",
        summary=summary or None,
        safety=events.Safety(
            agent_name=run.agent_name,
            kind="timeout",
            message=message,
            details={"timeout_s": deadline.timeout_s},
        ),
    )
