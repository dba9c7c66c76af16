"""The agent run as the executor sees it: the row of ``kb.agent_runs`` and its proto form.

Status machine (DESIGN §4)::

    queued -> running -> completed | failed | cancelled | paused
    paused -> running (resume)
    running -> waiting -> queued (a tool call waits for approval, :mod:`approvals`)
    waiting -> failed | cancelled (approval deadline, CancelRun)

Every transition is a conditional UPDATE in :mod:`services.executor.store.runs`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import asyncpg

from agentfleet.events import (
    PersistedEvent,
    RunEvent,
    agent_run_to_proto,
    append_events,
    run_snapshot,
)
from agentfleet.v1 import common_pb2

RunStatus = Literal["queued", "running", "waiting", "completed", "failed", "cancelled", "paused"]
TERMINAL_STATUSES: frozenset[str] = frozenset({"completed", "failed", "cancelled"})


@dataclass(kw_only=True, slots=True)
class StartRunParams:
    """What StartRun/TriggerRun (and later spawns) ask for; validated by the server."""

    project_id: str
    agent_name: str
    agent_definition_id: str | None
    input: str
    max_steps: int | None = None
    timeout_s: float | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    request_id: str | None = None
    """Idempotency key; None = not idempotent."""
    request_fingerprint: str | None = None
    """What the StartRun/TriggerRun request asked (:func:`~services.executor.run_requests.
    start_fingerprint`), stored beside ``request_id``; a repeat of the id asking otherwise is
    refused. None for children: their derived key finds them again after a recovery,
    whatever their rebuilt parameters say."""
    task_id: str | None = None
    trace_id: str | None = None
    """Trace of the request that queued the run, so the run joins it."""
    trace_parent: str | None = None
    """W3C traceparent of the span that spawned the run (children only): its run span
    descends from that span."""
    parent_run_id: str | None = None
    """Set for a child run (spawn_agents, flows); root_run_id and depth come with it."""
    root_run_id: str | None = None
    depth: int = 0
    max_tokens: int | None = None
    """Token budget of a child (spawn_agents ``max_tokens_per_subtask``)."""
    thread_id: str | None = None
    """Thread of the run (:mod:`services.executor.threads`); None = not in a thread."""
    stream_deltas: bool = False
    """Stream the run's model calls as MODEL_TEXT_DELTA events (:func:`streams_deltas`)."""
    max_tree_cost_nanos: int | None = None
    """Cost limit of the tree this run roots (:mod:`services.executor.model.budgets`)."""
    remote_agent: Mapping[str, str] | None = None
    """A remote child: {name, card_url} of the project's remote A2A agent it runs on."""
    started_by: str | None = None
    """trigger, schedule or event for a run a trigger started; None: rpc, parent or task,
    as its parent and task say (:mod:`services.executor.triggers`)."""
    trigger_origin: Mapping[str, Any] | None = None
    """The event behind a triggered run (column trigger_origin)."""
    chain_depth: int = 0
    """Depth in a chain of triggered runs; 0 for a run no trigger started."""


@dataclass(kw_only=True, slots=True)
class RunRecord:
    """One row of ``kb.agent_runs``."""

    id: str
    project_id: str
    agent_definition_id: str | None
    agent_name: str
    status: RunStatus
    input: str
    labels: dict[str, str]
    summary: str | None
    error_message: str | None
    parent_run_id: str | None
    root_run_id: str
    depth: int
    step_count: int
    total_steps: int
    resume_count: int
    max_steps: int | None
    max_tokens: int | None
    timeout: dt.timedelta | None
    tokens_in: int
    tokens_out: int
    tokens_total_tree: int
    trace_id: str | None
    trace_parent: str | None
    task_id: str | None
    request_id: str | None
    lease_owner: str | None
    lease_expires_at: dt.datetime | None
    cancel_requested_at: dt.datetime | None
    created_at: dt.datetime
    started_at: dt.datetime | None
    completed_at: dt.datetime | None
    duration_ms: int | None
    output: dict[str, Any] | None = None
    """The final answer as JSON when the definition has an output_schema (column output)."""
    thread_id: str | None = None
    """Thread of the run (column thread_id, migration 0015); None = not in a thread."""
    waited_ms: int = 0
    """Time spent WAITING for approvals so far (column waited_ms)."""
    stream_deltas: bool = False
    """Whether its model calls stream MODEL_TEXT_DELTA events (column stream_deltas)."""
    cost_nanos: int = 0
    """What its model calls cost, nano-dollars (column cost_nanos, migration 0023)."""
    cost_total_tree_nanos: int = 0
    """cost_nanos of the run and its descendants."""
    max_tree_cost_nanos: int | None = None
    """The tree's cost limit, on its root (column max_tree_cost_nanos)."""
    request_fingerprint: str | None = None
    """What the request of ``request_id`` asked (column request_fingerprint, migration
    0022); None before it, or for a run the executor started itself."""
    queue_shard: int = 0
    """Counter shard the run counts in toward the queued-runs cap (migration 0030)."""
    remote_agent: dict[str, str] | None = None
    """Set for a remote child (column remote_agent, migration 0028): name, card_url, and
    url, card_name, task_id, context_id once known (:mod:`services.executor.remote_runs`)."""
    started_by: str = "rpc"
    """What started it: rpc, trigger, schedule, event, parent or task (migration 0027)."""
    trigger_origin: dict[str, Any] | None = None
    """The event behind a trigger, schedule or event run."""
    chain_depth: int = 0
    """Depth in a chain of triggered runs."""
    answered_model: str | None = None
    """The model of its latest model message (:data:`agentfleet.events.ANSWERED_MODEL`);
    selected only where the run's answer is reported (finish)."""

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> RunRecord:
        values = {
            name: row[name] for name in cls.__dataclass_fields__ if name not in _OPTIONAL_COLUMNS
        }
        # Not every statement selects output (added by migration 0014).
        values["output"] = row.get("output")
        values["thread_id"] = row.get("thread_id")
        values["waited_ms"] = row.get("waited_ms") or 0
        values["stream_deltas"] = bool(row.get("stream_deltas"))
        values["request_fingerprint"] = row.get("request_fingerprint")
        values["cost_nanos"] = row.get("cost_nanos") or 0
        values["cost_total_tree_nanos"] = row.get("cost_total_tree_nanos") or 0
        values["max_tree_cost_nanos"] = row.get("max_tree_cost_nanos")
        values["queue_shard"] = row.get("queue_shard") or 0
        values["remote_agent"] = row.get("remote_agent")
        values["started_by"] = row.get("started_by") or "rpc"
        values["trigger_origin"] = row.get("trigger_origin")
        values["chain_depth"] = row.get("chain_depth") or 0
        values["answered_model"] = row.get("answered_model")
        for key in ("id", "agent_definition_id", "parent_run_id", "root_run_id", "task_id"):
            if values[key] is not None:
                values[key] = str(values[key])
        values["labels"] = dict(values["labels"] or {})
        return cls(**values)

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    def as_mapping(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    def to_proto(self) -> common_pb2.AgentRun:
        """The run as the API returns it."""
        return agent_run_to_proto(self.as_mapping())

    def snapshot(self) -> dict[str, Any]:
        """The ``run`` payload of RUN_QUEUED / RUN_FINISHED events."""
        return run_snapshot(self.as_mapping())


async def append_run_events(
    conn: asyncpg.Connection, run: RunRecord, batch: Sequence[RunEvent], *, notify: bool = True
) -> list[PersistedEvent]:
    """Appends ``batch`` to the run's events in the caller's transaction; the events as
    stored (:func:`agentfleet.events.append_events`, ``notify`` as there)."""
    return await append_events(
        conn,
        project_id=run.project_id,
        run_id=run.id,
        root_run_id=run.root_run_id,
        events=batch,
        notify=notify,
    )


def streams_deltas(definition_streaming: bool | None, *, followed: bool) -> bool:
    """Whether a run streams its model calls (MODEL_TEXT_DELTA): as its definition says,
    and by default (``streaming`` unset) when the caller follows it from its start
    (StartRun, ResumeRun), not when it only queues it (TriggerRun, spawns, tasks)."""
    return followed if definition_streaming is None else definition_streaming


_OPTIONAL_COLUMNS = frozenset(
    {
        "output",
        "thread_id",
        "waited_ms",
        "stream_deltas",
        "request_fingerprint",
        "cost_nanos",
        "cost_total_tree_nanos",
        "max_tree_cost_nanos",
        "queue_shard",
        "remote_agent",
        "started_by",
        "trigger_origin",
        "chain_depth",
        "answered_model",
    }
)
"""Columns some statements do not select; the others are required."""
