"""Run events as domain values (DESIGN §4 "Streaming", §5; seed 004) and their jsonb payload.

An event is a small frozen dataclass tagged by a ``Literal`` ``type`` that mirrors one branch
of the ``RunEvent.payload`` oneof in ``common.proto``. Every event carries the agent that
produced it (seed 004 attribution invariant) and ``is_internal`` (coordination plumbing,
hidden unless asked for). Stored, its other fields are the row's jsonb ``payload``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal, TypeAlias

RunStatusName = Literal[
    "queued", "running", "waiting", "completed", "failed", "cancelled", "paused"
]
ToolCallStatusName = Literal[
    "started",
    "completed",
    "failed",
    "refused",
    "interrupted",
    "awaiting_approval",
    "approved",
    "rejected",
]
SafetyKindName = Literal[
    "step_limit",
    "timeout",
    "doom_loop_warning",
    "doom_loop_stop",
    "depth_refusal",
    "token_budget",
    "total_step_cap",
    "tool_not_allowed",
    "call_after_soft_stop",
    "approval_required",
    "approval_deadline",
    "model_fallback",
    "budget_warning",
    "budget_stop",
]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class _Envelope:
    """What every event carries besides its ``type``: the agent that produced it (seed 004
    attribution) and whether it is coordination plumbing, hidden unless asked for."""

    agent_name: str
    is_internal: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RunQueued(_Envelope):
    """The run was inserted as queued. ``run`` is :func:`run_snapshot` of the row."""

    type: Literal["run_queued"] = "run_queued"
    run: dict[str, Any]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RunStarted(_Envelope):
    """A worker began (or after a crash / resume, continued) executing the run."""

    type: Literal["run_started"] = "run_started"
    model_name: str = ""
    tool_names: tuple[str, ...] = ()
    recovered: bool = False
    resumed: bool = False
    worker: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ModelText(_Envelope):
    """Text (or a thought) of a model reply."""

    type: Literal["model_text"] = "model_text"
    text: str
    step: int
    thought: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ToolRequest(_Envelope):
    """The model asked for a tool call. ``source`` as stored: builtin, mcp:<server>, executor,
    or "" when the name matched no resolved tool."""

    type: Literal["tool_request"] = "tool_request"
    tool_call_id: str
    tool_name: str
    arguments: dict[str, Any] = dataclasses.field(default_factory=dict)
    step: int
    source: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ToolResponse(_Envelope):
    """The outcome of a tool call: exactly one per ToolRequest."""

    type: Literal["tool_response"] = "tool_response"
    tool_call_id: str
    tool_name: str
    status: ToolCallStatusName
    result: dict[str, Any] | None = None
    error: str = ""
    duration_ms: int = 0
    step: int


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ChildRunEvent(_Envelope):
    """What CHILD_RUN_STARTED and CHILD_RUN_FINISHED both say (one ``ChildRun`` message on
    the wire). ``agent_name`` is the parent's; ``child_agent_name`` the child's."""

    child_run_id: str
    child_agent_name: str
    description: str = ""
    tool_call_id: str = ""
    summary: str = ""
    error_message: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ChildRunStarted(ChildRunEvent):
    """A child run was spawned."""

    type: Literal["child_run_started"] = "child_run_started"
    status: RunStatusName = "queued"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ChildRunFinished(ChildRunEvent):
    """A child run stopped (terminal or paused)."""

    type: Literal["child_run_finished"] = "child_run_finished"
    status: RunStatusName


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Safety(_Envelope):
    """A safety layer acted (DESIGN §6)."""

    type: Literal["safety"] = "safety"
    kind: SafetyKindName
    message: str
    details: dict[str, Any] = dataclasses.field(default_factory=dict)
    step: int = 0


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class StatusChanged(_Envelope):
    """The run's status changed."""

    type: Literal["status_changed"] = "status_changed"
    from_status: RunStatusName
    to_status: RunStatusName
    reason: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ModelQuotaWait(_Envelope):
    """A model call started (``waiting``) or stopped waiting for its model's quota; the
    run stays running."""

    type: Literal["model_quota_wait"] = "model_quota_wait"
    waiting: bool
    model: str
    limit: str
    """One of a fixed set of names (``requests_per_minute``, ... ``rate_limit``)."""
    expected_wait_s: float
    step: int = 0
    waited_s: float = 0.0
    """How long the call waited; set when ``waiting`` is false."""
    message: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RemoteStatus(_Envelope):
    """The remote A2A task of a remote child changed state (the TaskState's name without
    its prefix, lower case), recorded whether or not the update carried text."""

    type: Literal["remote_status"] = "remote_status"
    state: str
    task_id: str = ""
    step: int = 0


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RunFinished(_Envelope):
    """The execution stopped; the last event of an execution. ``run``: :func:`run_snapshot`."""

    type: Literal["run_finished"] = "run_finished"
    run: dict[str, Any]


RunEvent: TypeAlias = (
    RunQueued
    | RunStarted
    | ModelText
    | ToolRequest
    | ToolResponse
    | ChildRunStarted
    | ChildRunFinished
    | Safety
    | StatusChanged
    | ModelQuotaWait
    | RemoteStatus
    | RunFinished
)

_EVENT_CLASSES: dict[str, type[RunEvent]] = {
    cls.__dataclass_fields__["type"].default: cls  # type: ignore[misc]
    for cls in (
        RunQueued,
        RunStarted,
        ModelText,
        ToolRequest,
        ToolResponse,
        ChildRunStarted,
        ChildRunFinished,
        Safety,
        StatusChanged,
        ModelQuotaWait,
        RemoteStatus,
        RunFinished,
    )
}
_ENVELOPE = frozenset({"type", "agent_name", "is_internal"})
# Each class's payload field names, read once: dataclasses.fields() per event was a
# measurable part of every step's event handling.
_PAYLOAD_FIELDS: dict[type[RunEvent], tuple[str, ...]] = {
    cls: tuple(f.name for f in dataclasses.fields(cls) if f.name not in _ENVELOPE)
    for cls in _EVENT_CLASSES.values()
}
_KNOWN_PAYLOAD_KEYS: dict[str, frozenset[str]] = {
    type_: frozenset(_PAYLOAD_FIELDS[cls]) for type_, cls in _EVENT_CLASSES.items()
}


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PersistedEvent:
    """An event as stored: its run, its gapless seq, and when it was persisted."""

    run_id: str
    root_run_id: str
    seq: int
    created_at: datetime
    event: RunEvent

    @property
    def is_terminal(self) -> bool:
        """True for RUN_FINISHED, the last event of an execution."""
        return self.event.type == "run_finished"


def is_event_type(type_: str) -> bool:
    """True for the ``type`` of one of the event classes (``"model_text"``, ...)."""
    return type_ in _EVENT_CLASSES


def event_payload(event: RunEvent) -> dict[str, Any]:
    """The jsonb payload of ``event``: its fields without type, agent_name and is_internal."""
    names = _PAYLOAD_FIELDS.get(type(event))
    if names is None:  # a subclass of an event: read its own fields
        names = tuple(f.name for f in dataclasses.fields(event) if f.name not in _ENVELOPE)
    payload: dict[str, Any] = {}
    for name in names:
        value = getattr(event, name)
        payload[name] = list(value) if isinstance(value, tuple) else value
    return payload


def event_from_payload(
    type_: str, *, agent_name: str, is_internal: bool, payload: Mapping[str, Any]
) -> RunEvent:
    """Rebuilds an event from its stored columns; unknown payload keys are ignored so an
    older reader survives a newer writer."""
    cls = _EVENT_CLASSES.get(type_)
    if cls is None:
        raise ValueError(f"unknown run event type {type_!r}")
    known = _KNOWN_PAYLOAD_KEYS[type_]
    values = {k: v for k, v in payload.items() if k in known}
    if "tool_names" in values:
        values["tool_names"] = tuple(values["tool_names"])
    return cls(agent_name=agent_name, is_internal=is_internal, **values)
