"""The coordination tools the executor runs itself (DESIGN §6, §7; seed 001 pattern 1):
``list_available_agents``, ``spawn_agents`` and ``exit_loop``.

ToolPool lists them in the catalog (so whitelists and resolution treat them like any tool)
and refuses to run them; the agent loop hands their calls to :class:`Coordinator`.

Depth rules are checked twice: resolution drops the spawn tools below the top unless the
definition names them exactly (and always at depth 2), and :func:`screen_depth` refuses a
call the model makes anyway, with a SAFETY ``depth_refusal`` event.

Limits (clear tool errors when exceeded): :data:`MAX_CHILDREN_PER_CALL` children per
spawn_agents call, :data:`MAX_RUNS_PER_TREE` runs in one run tree.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from agentfleet import events
from agentfleet.observability.telemetry import current_traceparent
from agentfleet.run_limits import (
    MAX_SPAWN_DEPTH,
    TIMEOUT_RANGE,
    spawn_tool_refusal,
    timeout_allowed,
)
from services.executor.calls import PlannedCall
from services.executor.coordination.children import ChildBatch, ChildRuns, ChildTask
from services.executor.registry.definitions import AgentDefinition, DefinitionRepository
from services.executor.runs import RunRecord
from services.executor.store import run_reads, tool_calls
from services.executor.tools.tool_gateway import ToolOutcome

MAX_CHILDREN_PER_CALL = 16
"""Tasks one spawn_agents call may start."""
MAX_RUNS_PER_TREE = 200
"""Runs one tree (root and every descendant) may hold; spawns past it are refused."""
MAX_PROMPT_CHARS = 200_000


class SpawnArgumentError(ValueError):
    """spawn_agents arguments the model must fix; the message names the field."""


def screen_depth(
    calls: Sequence[PlannedCall],
    *,
    depth: int,
    definition_tools: Sequence[str],
    agent_name: str,
    step: int,
) -> tuple[list[PlannedCall], list[events.RunEvent]]:
    """Refuses spawn-tool calls the depth rules forbid, even when the model names a tool it
    was never given; one SAFETY ``depth_refusal`` per refused call."""
    screened: list[PlannedCall] = []
    safety: list[events.RunEvent] = []
    for call in calls:
        why = spawn_tool_refusal(
            call.tool_name, depth=depth, named_exactly=call.tool_name in definition_tools
        )
        if why is None:
            screened.append(call)
            continue
        screened.append(dataclasses.replace(call, refusal=why, source="executor"))
        safety.append(
            events.Safety(
                agent_name=agent_name,
                kind="depth_refusal",
                message=why,
                details={"tool_name": call.tool_name, "depth": depth, "max_depth": MAX_SPAWN_DEPTH},
                step=step,
            )
        )
    return screened, safety


def parse_spawn_arguments(arguments: dict[str, Any]) -> tuple[list[ChildTask], int | None]:
    """The tasks and max_tokens_per_subtask of a spawn_agents call; SpawnArgumentError
    naming the first bad field."""
    tasks = arguments.get("tasks")
    if not isinstance(tasks, list) or not tasks:
        raise SpawnArgumentError("tasks: must be a non-empty list of {agent_name, prompt, ...}")
    parsed: list[ChildTask] = []
    for i, task in enumerate(tasks):
        where = f"tasks[{i}]"
        if not isinstance(task, dict):
            raise SpawnArgumentError(f"{where}: must be an object")
        name = task.get("agent_name")
        if not isinstance(name, str) or not name.strip():
            raise SpawnArgumentError(f"{where}.agent_name: is required")
        resume = task.get("resume_run_id")
        if resume is not None and not isinstance(resume, str):
            raise SpawnArgumentError(f"{where}.resume_run_id: must be a run id string")
        prompt = task.get("prompt", "")
        if not isinstance(prompt, str) or (not prompt.strip() and not resume):
            raise SpawnArgumentError(f"{where}.prompt: is required")
        if len(prompt) > MAX_PROMPT_CHARS:
            raise SpawnArgumentError(f"{where}.prompt: longer than {MAX_PROMPT_CHARS} chars")
        description = task.get("description", "")
        if not isinstance(description, str):
            raise SpawnArgumentError(f"{where}.description: must be a string")
        timeout = task.get("timeout_s")
        if timeout is not None and (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not math.isfinite(timeout)
            or not timeout_allowed(timeout)
        ):
            raise SpawnArgumentError(
                f"{where}.timeout_s: must be a number of seconds, {TIMEOUT_RANGE}"
            )
        parsed.append(
            ChildTask(
                agent_name=name.strip(),
                description=description,
                input=prompt,
                timeout_s=float(timeout) if timeout is not None else None,
                resume_run_id=resume or None,
            )
        )
    budget = arguments.get("max_tokens_per_subtask")
    if budget is not None:
        if isinstance(budget, float) and budget.is_integer():
            budget = int(budget)
        if isinstance(budget, bool) or not isinstance(budget, int) or budget <= 0:
            raise SpawnArgumentError("max_tokens_per_subtask: must be a positive integer")
    return parsed, budget


def current_trace_parent() -> str | None:
    """The W3C traceparent of the current span (None when nothing is traced)."""
    return current_traceparent()


@dataclass(kw_only=True, slots=True)
class Coordinator:
    """Runs the coordination tools for the agent loop."""

    pool: asyncpg.Pool
    definitions: DefinitionRepository
    children: ChildRuns
    max_children_per_call: int = MAX_CHILDREN_PER_CALL
    max_runs_per_tree: int = MAX_RUNS_PER_TREE

    async def call(
        self, run: RunRecord, definition: AgentDefinition, call: PlannedCall
    ) -> ToolOutcome:
        """Runs one coordination call; failures are error outcomes for the model."""
        started = time.perf_counter()
        outcome = await self._call(run, definition, call)
        elapsed = int((time.perf_counter() - started) * 1000)
        return dataclasses.replace(outcome, duration_ms=elapsed)

    async def _call(
        self, run: RunRecord, definition: AgentDefinition, call: PlannedCall
    ) -> ToolOutcome:
        refusal = spawn_tool_refusal(
            call.tool_name, depth=run.depth, named_exactly=call.tool_name in definition.tools
        )
        if refusal is not None:
            return _error(refusal, failed=True)
        match call.tool_name:
            case "list_available_agents":
                return await self.list_available_agents(run)
            case "spawn_agents":
                return await self.spawn_agents(run, call)
            case "exit_loop":
                return exit_loop(run, call.arguments)
        return _error(f"{call.tool_name!r} is not a coordination tool", failed=True)

    async def list_available_agents(self, run: RunRecord) -> ToolOutcome:
        """Every definition of the project (any visibility) but the caller's, then its remote
        A2A agents (``flow_type`` ``remote_a2a``, their card URL); no prompts, no headers."""
        agents = [
            {
                "name": d.name,
                "description": d.description,
                "tools": list(d.tools),
                "flow_type": d.flow_type,
            }
            for d in await self.definitions.list_all(run.project_id)
            if d.name != run.agent_name
        ]
        local = {a["name"] for a in agents}
        remote = self.children.remote_agents
        for r in await remote.list_all(run.project_id) if remote is not None else []:
            if r.name in local or r.name == run.agent_name:
                continue  # a definition of the name wins (spawn_agents runs that one)
            agents.append(
                {
                    "name": r.name,
                    "description": r.description,
                    "tools": [],
                    "flow_type": "remote_a2a",
                    "remote": {"card_url": r.card_url},
                }
            )
        return ToolOutcome(result={"agents": agents})

    async def spawn_agents(self, run: RunRecord, call: PlannedCall) -> ToolOutcome:
        """One child run per task, all at once; waits for all of them."""
        try:
            tasks, budget = parse_spawn_arguments(call.arguments)
        except SpawnArgumentError as exc:
            return _error(f"invalid spawn_agents call: {exc}")
        if len(tasks) > self.max_children_per_call:
            return _error(
                f"tasks: {len(tasks)} tasks, but one spawn_agents call may start at most "
                f"{self.max_children_per_call} (MAX_CHILDREN_PER_CALL); split the work"
            )
        in_tree = await run_reads.count_in_tree(self.pool, run.project_id, run.root_run_id)
        new = sum(1 for t in tasks if t.resume_run_id is None)
        already = await tool_calls.spawned(self.pool, run.project_id, run.id, call.tool_call_id)
        if not already and in_tree + new > self.max_runs_per_tree:
            return _error(
                f"run tree limit: the tree holds {in_tree} runs and {new} more would pass "
                f"MAX_RUNS_PER_TREE ({self.max_runs_per_tree}); no child was started"
            )
        started = await self.children.start(
            ChildBatch(
                parent=run,
                key=call.tool_call_id,
                tasks=tasks,
                tool_call_id=call.tool_call_id,
                max_tokens=budget,
                trace_parent=current_trace_parent(),
            )
        )
        finished = await self.children.wait(run, started.children, tool_call_id=call.tool_call_id)
        results: list[dict[str, Any]] = []
        failed: list[dict[str, Any]] = [
            {"agent_name": f.agent_name, "description": f.description, "error": f.error}
            for f in started.failures
        ]
        for ref in started.children:
            child = finished[ref.run_id]
            if child.status in ("completed", "paused"):
                results.append(
                    {
                        "agent_name": ref.agent_name,
                        "description": ref.description,
                        "run_id": child.id,
                        "status": child.status,
                        "summary": child.summary or "",
                    }
                )
                if child.output is not None:
                    # The child's definition has an output_schema: its typed answer.
                    results[-1]["output"] = child.output
            else:
                failed.append(
                    {
                        "agent_name": ref.agent_name,
                        "description": ref.description,
                        "run_id": child.id,
                        "error": child.error_message or f"child run ended {child.status}",
                    }
                )
        body = {"results": results, "failed": failed}
        if not results:
            errors = "; ".join(f"{f['agent_name']}: {f['error']}" for f in failed)
            return ToolOutcome(result=body, is_error=True, error=f"all sub-agents failed: {errors}")
        return ToolOutcome(result=body)


def exit_loop(run: RunRecord, arguments: dict[str, Any]) -> ToolOutcome:
    """Marks the call; the enclosing loop flow ends after this run finishes."""
    if run.parent_run_id is None:
        return _error("exit_loop: this run is not a member of a loop flow, there is no loop to end")
    reason = arguments.get("reason")
    return ToolOutcome(
        result={
            "loop_exited": True,
            "reason": reason if isinstance(reason, str) else "",
            "note": "the loop ends after this run: give your final answer now",
        }
    )


def _error(message: str, *, failed: bool = False) -> ToolOutcome:
    return ToolOutcome(result={"error": message}, is_error=True, error=message, failed=failed)
