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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg
from opentelemetry import trace

from agentfleet.run_limits import MAX_SPAWN_DEPTH, may_spawn
from services.executor.children import ChildBatch, ChildRuns, ChildTask
from services.executor.control import StopRun
from services.executor.coordination import current_trace_parent
from services.executor.registry.definitions import DEFAULT_MAX_ITERATIONS, AgentDefinition
from services.executor.runs import RunRecord
from services.executor.store import tool_calls

_tracer = trace.get_tracer("agentfleet.executor")


@dataclass(kw_only=True, slots=True)
class FlowRunner:
    """Runs the members of flow definitions as child runs."""

    pool: asyncpg.Pool
    children: ChildRuns

    async def run(self, run: RunRecord, definition: AgentDefinition) -> StopRun:
        """Runs the flow to its end (cancellation propagates to the caller)."""
        flow = definition.flow_type
        if not definition.sub_agents:
            return _failed(f"{flow} flow {definition.name!r} has no sub_agents")
        if not may_spawn(run.depth):
            return _failed(
                f"{flow} flow at depth {run.depth} cannot start its members: runs at depth "
                f"{MAX_SPAWN_DEPTH} cannot spawn"
            )
        if flow == "parallel":
            return await self._parallel(run, definition.sub_agents)
        passes = (definition.max_iterations or DEFAULT_MAX_ITERATIONS) if flow == "loop" else 1
        text = run.input
        for iteration in range(passes):
            for index, member in enumerate(definition.sub_agents):
                try:
                    child = await self._member(run, f"flow:{iteration}:{index}", member, text)
                except _MemberError as exc:
                    return _failed(f"member {member!r} could not start: {exc}", summary=text)
                if child.status != "completed":
                    return _failed(
                        f"member {member!r} (run {child.id}) ended {child.status}"
                        + (f": {child.error_message}" if child.error_message else ""),
                        summary=child.summary or text,
                    )
                text = child.summary or ""
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

    async def _member(self, run: RunRecord, key: str, member: str, text: str) -> RunRecord:
        with _tracer.start_as_current_span(f"flow_member {member}"):
            started = await self.children.start(
                ChildBatch(
                    parent=run,
                    key=key,
                    tasks=[ChildTask(agent_name=member, description=key, input=text)],
                    trace_parent=current_trace_parent(),
                )
            )
        if started.failures:
            raise _MemberError(started.failures[0].error)
        (ref,) = started.children
        return (await self.children.wait(run, [ref]))[ref.run_id]

    async def _parallel(self, run: RunRecord, members: Sequence[str]) -> StopRun:
        with _tracer.start_as_current_span("flow_parallel"):
            started = await self.children.start(
                ChildBatch(
                    parent=run,
                    key="flow:parallel",
                    tasks=[
                        ChildTask(agent_name=m, description=m, input=run.input) for m in members
                    ],
                    trace_parent=current_trace_parent(),
                )
            )
        finished = await self.children.wait(run, started.children)
        parts: list[str] = []
        failures = [f"{f.agent_name}: {f.error}" for f in started.failures]
        for ref in started.children:
            child = finished[ref.run_id]
            if child.status == "completed":
                parts.append(f"## {ref.agent_name}\n{child.summary or ''}")
            else:
                failures.append(
                    f"{ref.agent_name}: ended {child.status} {child.error_message or ''}".strip()
                )
        if not parts:
            return _failed("every member failed: " + "; ".join(failures))
        completed = len(parts)
        if failures:
            parts.append("## failed members\n" + "\n".join(failures))
        return StopRun(
            status="completed",
            reason=f"{completed} of {len(members)} members completed",
            summary="\n\n".join(parts),
        )

    async def _exited_loop(self, child: RunRecord) -> bool:
        return await tool_calls.exited_loop(self.pool, child.project_id, child.id)


class _MemberError(Exception):
    """A member could not be started (its definition is gone)."""


def _failed(message: str, *, summary: str | None = None) -> StopRun:
    return StopRun(status="failed", reason="flow failed", summary=summary, error_message=message)
