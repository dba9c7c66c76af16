"""What the worker and the safety hooks exchange with a running agent loop."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from google.genai import types

from agentfleet import events
from agentfleet.errors import NotFound
from services.executor.registry.definitions import AgentDefinition
from services.executor.runs import RunRecord, RunStatus


class DefinitionSource(Protocol):
    async def get(self, project_id: str, name: str) -> AgentDefinition:
        """The definition; NotFound otherwise."""
        ...

    async def get_by_id(self, project_id: str, definition_id: uuid.UUID) -> AgentDefinition:
        """The definition with this id; NotFound otherwise."""
        ...


async def run_definition(source: DefinitionSource, run: RunRecord) -> AgentDefinition:
    """The definition ``run`` executes: the one StartRun / spawn_agents resolved at enqueue
    (``agent_definition_id``, the id the toolpool scopes the run's tools by), read once per
    execution. By name only for a run queued without one (its definition deleted since)."""
    if run.agent_definition_id is None:
        return await source.get(run.project_id, run.agent_name)
    try:
        return await source.get_by_id(run.project_id, uuid.UUID(run.agent_definition_id))
    except NotFound as exc:
        raise NotFound(
            f"agent {run.agent_name!r} not found in project {run.project_id!r} "
            f"(its definition {run.agent_definition_id} was deleted)"
        ) from exc


@dataclass(kw_only=True, slots=True)
class RunControl:
    """What the worker tells a running loop. Set a reason *before* cancelling the task."""

    cancel_reason: str | None = None
    """Set: the task's cancellation means "end the run ``cancelled``" with this reason."""
    draining: bool = False
    """Set at shutdown: stop at the next step boundary and leave the run for another worker."""
    resumed: bool = False
    """The run was claimed after ResumeRun (not after a crash): RUN_STARTED says so and the
    doom-loop count starts afresh."""
    retry_outages: bool = False
    """Set by the worker: an execution cut by an outage (:mod:`outages`) is left ``running``
    for the worker to run again, instead of ending ``failed``."""
    definition: AgentDefinition | None = None
    """The run's definition as the worker's claim read it; None: the loop reads it
    (:func:`run_definition`)."""
    never_started: bool = False
    """The claim took the run from the queue before it ever started: it has no messages or
    calls to continue from, so the loop does not read its position (two round trips)."""

    def cancel(self, reason: str) -> None:
        if self.cancel_reason is None:
            self.cancel_reason = reason


@dataclass(frozen=True, kw_only=True, slots=True)
class StepBoundary:
    """Where a run stands before its next step (input of :class:`StepHook`)."""

    run: RunRecord
    next_step: int
    """1-based number of the step about to start."""
    contents: Sequence[types.Content]
    last_text: str


@dataclass(frozen=True, kw_only=True, slots=True)
class StopRun:
    """How a run ends other than by the model's answer: a step hook's decision before the
    next step (:class:`StepHook`), or how a flow run ended (:mod:`flows`)."""

    status: RunStatus
    reason: str
    summary: str | None = None
    error_message: str | None = None
    safety: events.Safety | None = None
    """Recorded with the end (a flow that reached its timeout)."""


class StepHook(Protocol):
    async def __call__(self, boundary: StepBoundary) -> StopRun | None:
        """None lets the step run; a :class:`StopRun` ends the run instead."""
        ...
