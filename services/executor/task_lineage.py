"""Runs of tasks an agent created run with that agent's limits (issue 15).

A SpecTask written by ``create_subtasks`` records, server-side, the run that created it
(``created_by_run_id``) and the agents it may run with (``allowed_agents``, from the
creator's definition). When a run is queued for such a task (TriggerRun carries task_id),
the executor itself — not the dispatcher's request, not the model — places it one level
below its creator:

- parent = the creator, so depth = creator depth + 1 (DESIGN §6: at depth 2 nothing can
  spawn, and a creator at depth 2 is refused), in the creator's run tree;
- max_steps no larger than the creator's effective limit;
- the creator's token budget when it had one;
- the agent must be one of ``allowed_agents``.

The parent is for these limits only: the run still counts toward the project's queued and
running caps like a top-level run (:mod:`services.executor.store.caps`), since anyone may
queue it with TriggerRun and its creator never waits for it.

Tasks of CreateTaskGraph/AddTasks (no creator) are untouched: their caller is a user.
"""

from __future__ import annotations

import dataclasses
import uuid

import asyncpg

from agentfleet.errors import FailedPrecondition, PermissionDenied
from agentfleet.graph.task_properties import agent_allowed, allowed_agent_patterns
from agentfleet.run_limits import MAX_SPAWN_DEPTH, may_spawn
from services.executor.registry.definitions import AgentDefinition
from services.executor.runs import StartRunParams
from services.executor.safety import effective_max_steps
from services.executor.store import run_reads

__all__ = ["inherit_task_limits"]


async def inherit_task_limits(
    db: asyncpg.Pool | asyncpg.Connection, params: StartRunParams, definition: AgentDefinition
) -> StartRunParams:
    """``params`` placed under the run that created its task, with that run's limits.

    Unchanged when the run has no task or the task no creator. PermissionDenied when the
    agent is not one the creator's definition allows; FailedPrecondition when the creator
    is gone or already at the depth cap. ``definition`` is the agent the run will use.
    """
    if params.task_id is None:
        return params
    row = await run_reads.task_creator(db, params.project_id, uuid.UUID(params.task_id))
    if row is None or row.creator_id is None:
        return params
    task = params.task_id
    if row.creator_run_id is None:
        raise FailedPrecondition(
            f"task {task} was created by run {row.creator_id!r}, which is not a run of "
            "this project: the limits it must run with are unknown"
        )
    allowed = allowed_agent_patterns(row.properties) or ()
    if not agent_allowed(params.agent_name, allowed):
        raise PermissionDenied(
            f"agent {params.agent_name!r} may not run task {task}: the agent that created it "
            f"may assign only {', '.join(allowed) or 'no agents'}"
        )
    depth = row.creator_depth + 1
    if not may_spawn(row.creator_depth):
        raise FailedPrecondition(
            f"task {task} was created by a run at depth {row.creator_depth}; runs below "
            f"depth {MAX_SPAWN_DEPTH} cannot be started"
        )
    creator_steps = effective_max_steps(
        requested=row.creator_max_steps,
        definition=row.creator_definition_max_steps,
        depth=row.creator_depth,
    )
    max_steps = params.max_steps
    own_steps = effective_max_steps(
        requested=max_steps, definition=definition.max_steps, depth=depth
    )
    if creator_steps is not None and (own_steps is None or own_steps > creator_steps):
        max_steps = creator_steps
    max_tokens = params.max_tokens
    if row.creator_max_tokens is not None:
        max_tokens = min(max_tokens or row.creator_max_tokens, row.creator_max_tokens)
    return dataclasses.replace(
        params,
        parent_run_id=row.creator_run_id,
        root_run_id=row.creator_root_id,
        depth=depth,
        max_steps=max_steps,
        max_tokens=max_tokens,
    )
