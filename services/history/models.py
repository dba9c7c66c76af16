"""Rows the history repository returns, and the filters it takes."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Self


class _FromRow:
    """``from_row`` for dataclasses whose fields are named like the selected columns."""

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Self:
        names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
        return cls(**{name: row[name] for name in names})


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RunFilters:
    """ListRuns filters (AND). None / empty = no filter."""

    project_id: str
    agent_name: str | None = None
    statuses: tuple[str, ...] = ()
    parent_run_id: str | None = None
    root_run_id: str | None = None
    top_level_only: bool = False
    created_after: datetime | None = None
    created_before: datetime | None = None
    include_internal_agents: bool = False
    task_id: str | None = None
    thread_id: str | None = None
    """Runs of one thread (agent_runs_thread_idx)."""
    started_by: str | None = None
    """Runs started so (agent_runs_project_started_by_created_idx)."""
    labels: tuple[tuple[str, str], ...] = ()
    """Runs holding every one of these labels (key, value), sorted."""

    def digest_fields(self) -> dict[str, Any]:
        """What a page token is bound to."""
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RunOverview(_FromRow):
    """A run as lists show it (input cut to a preview in SQL)."""

    id: Any
    agent_name: str
    status: str
    parent_run_id: Any
    root_run_id: Any
    depth: int
    total_steps: int
    tokens_in: int
    tokens_out: int
    input_preview: str
    input_truncated: bool
    created_at: datetime
    completed_at: datetime | None
    duration_ms: int | None
    resume_count: int
    task_id: Any
    labels: dict[str, Any]
    thread_id: str | None
    cost_nanos: int
    started_by: str
    chain_depth: int
    remote_agent: dict[str, Any] | None = None
    """A remote A2A child's agent (migration 0028); None for a local run."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class AgentInfo(_FromRow):
    """The current definition of a run's agent (GetRun)."""

    name: str
    description: str
    flow_type: str
    visibility: str
    tools: list[str]
    model: dict[str, Any]
    product_name: str | None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RunCounts(_FromRow):
    """How much a run recorded (GetRun)."""

    message_count: int
    tool_call_count: int
    last_event_seq: int


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class MessageRow(_FromRow):
    """A conversation message with its content."""

    id: Any
    run_id: Any
    seq: int
    step_number: int
    role: str
    agent_name: str
    content: dict[str, Any]
    size_bytes: int
    tokens: int
    is_internal: bool
    created_at: datetime
    model_name: str | None
    """The model that answered (model messages recorded since migration 0023)."""
    cost_nanos: int


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ToolCallOverview(_FromRow):
    """A tool call without input and output."""

    id: Any
    run_id: Any
    tool_call_id: str
    step_number: int
    tool_name: str
    source: str
    status: str
    duration_ms: int | None
    error_preview: str | None
    input_size_bytes: int
    output_size_bytes: int
    child_run_ids: list[Any]
    created_at: datetime


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ToolCallRow(_FromRow):
    """A tool call in full."""

    id: Any
    run_id: Any
    message_id: Any
    tool_call_id: str
    step_number: int
    tool_name: str
    source: str
    input: dict[str, Any]
    output: dict[str, Any] | None
    status: str
    error: str | None
    duration_ms: int | None
    child_run_ids: list[Any]
    created_at: datetime
    completed_at: datetime | None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class TreeRow(_FromRow):
    """One run of a spawn tree."""

    id: Any
    parent_run_id: Any
    agent_name: str
    status: str
    depth: int
    step_count: int
    total_steps: int
    tokens_in: int
    tokens_out: int
    tokens_total_tree: int
    cost_nanos: int
    cost_total_tree_nanos: int
    duration_ms: int | None
    summary_preview: str | None
    created_at: datetime
    quota_wait: dict[str, Any] | None
    quota_wait_since: datetime | None
    remote_agent: dict[str, Any] | None = None
    """A remote A2A child's agent (migration 0028); None for a local run."""
    started_by: str = "rpc"
    trigger_origin: dict[str, Any] | None = None
    """The event behind a triggered run (migration 0027); None for others."""
    chain_depth: int = 0


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class StatsRow(_FromRow):
    """Statistics of one agent over a window."""

    agent_name: str
    total_runs: int
    queued: int
    running: int
    completed: int
    failed: int
    cancelled: int
    paused: int
    p50_ms: float | None
    p95_ms: float | None
    tokens_in: int
    tokens_out: int
    cost_nanos: int
    mean_steps: float
    resumes: int
    task_retries: int
