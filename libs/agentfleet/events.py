"""Run events (DESIGN §4 "Streaming", §5; seed 004): the domain, the store, and live fan-out.

An event is a small frozen dataclass tagged by a ``Literal`` ``type`` that mirrors one branch
of the ``RunEvent.payload`` oneof in ``common.proto``. Every event carries the agent that
produced it (seed 004 attribution invariant) and ``is_internal`` (coordination plumbing,
hidden unless asked for).

Storage (table ``kb.agent_run_events``): :func:`append_events` gives a run's events a gapless
``seq`` (1, 2, 3 ...), counted on the run row (``last_event_seq``), inside the caller's
transaction and sends ``NOTIFY
agentfleet_run_events, '<run_id>:<last seq>'``, delivered only at commit.
:func:`read_events` reads them back. Live streams and replays are identical because both are
built from stored rows: :func:`append_events` returns the rows as the database returned them,
and :func:`to_proto` is the only way either becomes a ``RunEvent``.

:class:`EventHub` fans persisted events out in-process (the executor's StartRun stream), so a
local subscriber need not wait for the database round trip.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, TypeAlias

import asyncpg
from google.protobuf import json_format

from agentfleet.errors import NotFound
from agentfleet.v1 import common_pb2

__all__ = [
    "CHANNEL",
    "INSERT_EVENTS_CTE",
    "NOTIFY_LAST_EVENT",
    "ChildRunFinished",
    "ChildRunStarted",
    "EventHub",
    "EventStreamLagged",
    "ModelText",
    "PersistedEvent",
    "RunEvent",
    "RunFinished",
    "RunQueued",
    "RunStarted",
    "Safety",
    "StatusChanged",
    "Subscription",
    "ToolRequest",
    "ToolResponse",
    "agent_run_to_proto",
    "append_events",
    "event_from_payload",
    "from_proto",
    "parse_notification",
    "read_events",
    "run_snapshot",
    "to_proto",
    "tool_source_name",
    "tool_source_proto",
]

CHANNEL = "agentfleet_run_events"
"""NOTIFY channel; payload ``"<run_id>:<last seq>"``."""

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
]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RunQueued:
    """The run was inserted as queued. ``run`` is :func:`run_snapshot` of the row."""

    type: Literal["run_queued"] = "run_queued"
    agent_name: str
    is_internal: bool = False
    run: dict[str, Any]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RunStarted:
    """A worker began (or after a crash / resume, continued) executing the run."""

    type: Literal["run_started"] = "run_started"
    agent_name: str
    is_internal: bool = False
    model_name: str = ""
    tool_names: tuple[str, ...] = ()
    recovered: bool = False
    resumed: bool = False
    worker: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ModelText:
    """Text (or a thought) of a model reply."""

    type: Literal["model_text"] = "model_text"
    agent_name: str
    is_internal: bool = False
    text: str
    step: int
    thought: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ToolRequest:
    """The model asked for a tool call. ``source`` as stored: builtin, mcp:<server>, executor,
    or "" when the name matched no resolved tool."""

    type: Literal["tool_request"] = "tool_request"
    agent_name: str
    is_internal: bool = False
    tool_call_id: str
    tool_name: str
    arguments: dict[str, Any] = dataclasses.field(default_factory=dict)
    step: int
    source: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ToolResponse:
    """The outcome of a tool call: exactly one per ToolRequest."""

    type: Literal["tool_response"] = "tool_response"
    agent_name: str
    is_internal: bool = False
    tool_call_id: str
    tool_name: str
    status: ToolCallStatusName
    result: dict[str, Any] | None = None
    error: str = ""
    duration_ms: int = 0
    step: int


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ChildRunStarted:
    """A child run was spawned. ``agent_name`` is the parent's; ``child_agent_name`` the child's."""

    type: Literal["child_run_started"] = "child_run_started"
    agent_name: str
    is_internal: bool = False
    child_run_id: str
    child_agent_name: str
    status: RunStatusName = "queued"
    description: str = ""
    tool_call_id: str = ""
    summary: str = ""
    error_message: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ChildRunFinished:
    """A child run stopped (terminal or paused)."""

    type: Literal["child_run_finished"] = "child_run_finished"
    agent_name: str
    is_internal: bool = False
    child_run_id: str
    child_agent_name: str
    status: RunStatusName
    description: str = ""
    tool_call_id: str = ""
    summary: str = ""
    error_message: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Safety:
    """A safety layer acted (DESIGN §6)."""

    type: Literal["safety"] = "safety"
    agent_name: str
    is_internal: bool = False
    kind: SafetyKindName
    message: str
    details: dict[str, Any] = dataclasses.field(default_factory=dict)
    step: int = 0


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class StatusChanged:
    """The run's status changed."""

    type: Literal["status_changed"] = "status_changed"
    agent_name: str
    is_internal: bool = False
    from_status: RunStatusName
    to_status: RunStatusName
    reason: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RunFinished:
    """The execution stopped; the last event of an execution. ``run``: :func:`run_snapshot`."""

    type: Literal["run_finished"] = "run_finished"
    agent_name: str
    is_internal: bool = False
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


# -- payload codec (pure) ---------------------------------------------------------------


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


# -- runs as protobuf -------------------------------------------------------------------


def _ts(value: datetime | None) -> Any:
    if value is None:
        return None
    stamp = common_pb2.google_dot_protobuf_dot_timestamp__pb2.Timestamp()
    stamp.FromDatetime(value)
    return stamp


def _duration(value: timedelta | None) -> Any:
    if value is None:
        return None
    duration = common_pb2.google_dot_protobuf_dot_duration__pb2.Duration()
    duration.FromTimedelta(value)
    return duration


def run_status_proto(status: str) -> int:
    """``"completed"`` -> ``RUN_STATUS_COMPLETED``."""
    return common_pb2.RunStatus.Value("RUN_STATUS_" + status.upper())


def run_status_name(status: int) -> str:
    """``RUN_STATUS_COMPLETED`` -> ``"completed"``."""
    return common_pb2.RunStatus.Name(status).removeprefix("RUN_STATUS_").lower()


def agent_run_to_proto(row: Mapping[str, Any]) -> common_pb2.AgentRun:
    """An ``AgentRun`` from a ``kb.agent_runs`` row (asyncpg Record or mapping)."""
    get = row.get
    run = common_pb2.AgentRun(
        id=str(row["id"]),
        project_id=row["project_id"],
        agent_definition_id=str(get("agent_definition_id") or ""),
        agent_name=row["agent_name"],
        status=run_status_proto(row["status"]),
        input=get("input") or "",
        summary=get("summary") or "",
        error_message=get("error_message") or "",
        parent_run_id=str(get("parent_run_id") or ""),
        root_run_id=str(get("root_run_id") or row["id"]),
        depth=get("depth") or 0,
        step_count=get("step_count") or 0,
        total_steps=get("total_steps") or 0,
        resume_count=get("resume_count") or 0,
        tokens_in=get("tokens_in") or 0,
        tokens_out=get("tokens_out") or 0,
        tokens_total_tree=get("tokens_total_tree") or 0,
        trace_id=get("trace_id") or "",
        task_id=str(get("task_id") or ""),
        request_id=get("request_id") or "",
        thread_id=get("thread_id") or "",
        labels={str(k): str(v) for k, v in (get("labels") or {}).items()},
    )
    if get("max_steps") is not None:
        run.max_steps = row["max_steps"]
    if get("max_tokens") is not None:
        run.max_tokens = row["max_tokens"]
    if get("output") is not None:
        run.output.update(row["output"])
    optional_messages = {
        "timeout": _duration(get("timeout")),
        "create_time": _ts(get("created_at")),
        "start_time": _ts(get("started_at")),
        "complete_time": _ts(get("completed_at")),
        "cancel_request_time": _ts(get("cancel_requested_at")),
    }
    if get("duration_ms") is not None:
        optional_messages["duration"] = _duration(timedelta(milliseconds=row["duration_ms"]))
    for name, value in optional_messages.items():
        if value is not None:
            getattr(run, name).CopyFrom(value)
    return run


def run_snapshot(row: Mapping[str, Any]) -> dict[str, Any]:
    """The ``run`` of RunQueued / RunFinished: a run row as AgentRun JSON (proto field names)."""
    return json_format.MessageToDict(agent_run_to_proto(row), preserving_proto_field_name=True)


# -- RunEvent protobuf <-> domain -------------------------------------------------------

_PROTO_FIELD = {
    "run_queued": "run_queued",
    "run_started": "run_started",
    "model_text": "model_text",
    "tool_request": "tool_request",
    "tool_response": "tool_response",
    "child_run_started": "child_run",
    "child_run_finished": "child_run",
    "safety": "safety",
    "status_changed": "status_changed",
    "run_finished": "run_finished",
}


def tool_source_proto(source: str) -> common_pb2.ToolSource:
    """The stored form (builtin, mcp:<server>, executor, "") as a ToolSource."""
    if source == "builtin":
        return common_pb2.ToolSource(kind=common_pb2.TOOL_SOURCE_KIND_BUILTIN)
    if source == "executor":
        return common_pb2.ToolSource(kind=common_pb2.TOOL_SOURCE_KIND_EXECUTOR)
    if source.startswith("mcp:"):
        return common_pb2.ToolSource(
            kind=common_pb2.TOOL_SOURCE_KIND_MCP, mcp_server=source.removeprefix("mcp:")
        )
    return common_pb2.ToolSource()


def tool_source_name(source: common_pb2.ToolSource) -> str:
    """The stored form of a ToolSource: builtin, mcp:<server>, executor or ""."""
    if source.kind == common_pb2.TOOL_SOURCE_KIND_BUILTIN:
        return "builtin"
    if source.kind == common_pb2.TOOL_SOURCE_KIND_EXECUTOR:
        return "executor"
    if source.kind == common_pb2.TOOL_SOURCE_KIND_MCP:
        return "mcp:" + source.mcp_server
    return ""


def _struct(value: Mapping[str, Any]) -> Any:
    struct = common_pb2.google_dot_protobuf_dot_struct__pb2.Struct()
    struct.update(value)
    return struct


def _payload_proto(event: RunEvent) -> Any:
    match event:
        case RunQueued(run=run):
            return common_pb2.RunQueued(run=json_format.ParseDict(run, common_pb2.AgentRun()))
        case RunFinished(run=run):
            return common_pb2.RunFinished(run=json_format.ParseDict(run, common_pb2.AgentRun()))
        case RunStarted():
            return common_pb2.RunStarted(
                model_name=event.model_name,
                tool_names=event.tool_names,
                recovered=event.recovered,
                resumed=event.resumed,
                worker=event.worker,
            )
        case ModelText():
            return common_pb2.ModelText(text=event.text, step=event.step, thought=event.thought)
        case ToolRequest():
            return common_pb2.ToolRequest(
                tool_call_id=event.tool_call_id,
                tool_name=event.tool_name,
                arguments=_struct(event.arguments),
                step=event.step,
                source=tool_source_proto(event.source),
            )
        case ToolResponse():
            response = common_pb2.ToolResponse(
                tool_call_id=event.tool_call_id,
                tool_name=event.tool_name,
                status=common_pb2.ToolCallStatus.Value("TOOL_CALL_STATUS_" + event.status.upper()),
                error=event.error,
                step=event.step,
            )
            if event.result is not None:
                response.result.CopyFrom(_struct(event.result))
            response.duration.CopyFrom(_duration(timedelta(milliseconds=event.duration_ms)))
            return response
        case ChildRunStarted() | ChildRunFinished():
            return common_pb2.ChildRun(
                child_run_id=event.child_run_id,
                agent_name=event.child_agent_name,
                status=run_status_proto(event.status),
                summary=event.summary,
                error_message=event.error_message,
                description=event.description,
                tool_call_id=event.tool_call_id,
            )
        case Safety():
            return common_pb2.Safety(
                kind=common_pb2.SafetyKind.Value("SAFETY_KIND_" + event.kind.upper()),
                message=event.message,
                details=_struct(event.details),
                step=event.step,
            )
        case StatusChanged():
            return common_pb2.StatusChanged(
                from_status=run_status_proto(event.from_status),
                to_status=run_status_proto(event.to_status),
                reason=event.reason,
            )
    raise TypeError(f"not a run event: {event!r}")


def to_proto(
    persisted: PersistedEvent, *, parent_run_id: str | None, trace_id: str | None
) -> common_pb2.RunEvent:
    """The wire form of a stored event. The run's parent and trace id are not stored per
    event; the caller passes them from the run row."""
    event = persisted.event
    message = common_pb2.RunEvent(
        run_id=persisted.run_id,
        root_run_id=persisted.root_run_id,
        parent_run_id=parent_run_id or "",
        seq=persisted.seq,
        agent_name=event.agent_name,
        type=common_pb2.RunEventType.Value("RUN_EVENT_TYPE_" + event.type.upper()),
        is_internal=event.is_internal,
        trace_id=trace_id or "",
    )
    message.create_time.FromDatetime(persisted.created_at)
    getattr(message, _PROTO_FIELD[event.type]).CopyFrom(_payload_proto(event))
    return message


def from_proto(message: common_pb2.RunEvent) -> PersistedEvent:
    """The domain form of a ``RunEvent`` (inverse of :func:`to_proto`)."""
    type_ = common_pb2.RunEventType.Name(message.type).removeprefix("RUN_EVENT_TYPE_").lower()
    if type_ not in _EVENT_CLASSES:
        raise ValueError(f"RunEvent.type {message.type} is not an event type")
    body = getattr(message, _PROTO_FIELD[type_])
    values: dict[str, Any] = {}
    match type_:
        case "run_queued" | "run_finished":
            values["run"] = json_format.MessageToDict(body.run, preserving_proto_field_name=True)
        case "run_started":
            values = json_format.MessageToDict(body, preserving_proto_field_name=True)
        case "model_text":
            values = {"text": body.text, "step": body.step, "thought": body.thought}
        case "tool_request":
            values = {
                "tool_call_id": body.tool_call_id,
                "tool_name": body.tool_name,
                "arguments": json_format.MessageToDict(body.arguments),
                "step": body.step,
                "source": tool_source_name(body.source),
            }
        case "tool_response":
            values = {
                "tool_call_id": body.tool_call_id,
                "tool_name": body.tool_name,
                "status": common_pb2.ToolCallStatus.Name(body.status)
                .removeprefix("TOOL_CALL_STATUS_")
                .lower(),
                "result": json_format.MessageToDict(body.result)
                if body.HasField("result")
                else None,
                "error": body.error,
                "duration_ms": body.duration.ToMilliseconds(),
                "step": body.step,
            }
        case "child_run_started" | "child_run_finished":
            values = {
                "child_run_id": body.child_run_id,
                "child_agent_name": body.agent_name,
                "status": run_status_name(body.status),
                "summary": body.summary,
                "error_message": body.error_message,
                "description": body.description,
                "tool_call_id": body.tool_call_id,
            }
        case "safety":
            values = {
                "kind": common_pb2.SafetyKind.Name(body.kind).removeprefix("SAFETY_KIND_").lower(),
                "message": body.message,
                "details": json_format.MessageToDict(body.details),
                "step": body.step,
            }
        case "status_changed":
            values = {
                "from_status": run_status_name(body.from_status),
                "to_status": run_status_name(body.to_status),
                "reason": body.reason,
            }
    event = event_from_payload(
        type_, agent_name=message.agent_name, is_internal=message.is_internal, payload=values
    )
    return PersistedEvent(
        run_id=message.run_id,
        root_run_id=message.root_run_id,
        seq=message.seq,
        created_at=message.create_time.ToDatetime(tzinfo=UTC),
        event=event,
    )


# -- persistence ------------------------------------------------------------------------

Connection: TypeAlias = asyncpg.Connection | asyncpg.Pool

# Seqs come from the run row's ``last_event_seq``: the UPDATE takes the row lock, which
# orders concurrent appenders to one run until commit, and in read committed it re-reads the
# row as the previous holder committed it, so one statement both allocates the seqs and
# inserts the events (no max(seq) read, whose snapshot would predate the lock). The run
# must exist in the project; otherwise nothing is written and no row comes back.
# $1 run, $2 project, $3 root run, $4..$7 the events' columns, $8 the NOTIFY channel.
INSERT_EVENTS_CTE = """
ev AS (
    INSERT INTO kb.agent_run_events (
        run_id, seq, root_run_id, type, agent_name, is_internal, payload)
    SELECT r.id, r.last_event_seq - cardinality($4::text[]) + e.ord, $3::uuid, e.type,
           e.agent_name, e.is_internal, e.payload
    FROM numbered r
    CROSS JOIN unnest($4::text[], $5::text[], $6::boolean[], $7::jsonb[])
         WITH ORDINALITY AS e(type, agent_name, is_internal, payload, ord)
    RETURNING run_id, root_run_id, seq, type, agent_name, is_internal, payload, created_at
)"""
"""The events' insert of a statement whose CTE ``numbered`` is the run row after its
``last_event_seq`` was raised by ``cardinality($4)`` (shared with the executor's step
writes, which number events in the statement that also updates the run's counters)."""

NOTIFY_LAST_EVENT = """(SELECT pg_notify($8, max(run_id::text) || ':' || max(seq)) FROM ev
 HAVING count(*) > 0)"""
"""A select-list expression sending ``NOTIFY CHANNEL '<run_id>:<last seq>'`` once for
``ev``'s rows (delivered at commit); nothing when ``ev`` is empty."""

_INSERT_EVENTS = (
    """
WITH numbered AS (
    UPDATE kb.agent_runs SET last_event_seq = last_event_seq + cardinality($4::text[])
    WHERE id = $1::uuid AND project_id = $2
    RETURNING id, last_event_seq
),"""
    + INSERT_EVENTS_CTE
    + f"""
SELECT ev.*, {NOTIFY_LAST_EVENT} AS notified
FROM ev
"""
)

_SELECT_EVENTS = """
SELECT e.run_id, e.root_run_id, e.seq, e.type, e.agent_name, e.is_internal, e.payload,
       e.created_at
FROM kb.agent_run_events e
JOIN kb.agent_runs r ON r.id = e.run_id
WHERE e.run_id = $1::uuid AND r.project_id = $2 AND e.seq > $3 AND ($4 OR NOT e.is_internal)
ORDER BY e.seq
LIMIT $5
"""


def persisted_from_row(row: Mapping[str, Any]) -> PersistedEvent:
    """A :class:`PersistedEvent` from a ``kb.agent_run_events`` row."""
    return PersistedEvent(
        run_id=str(row["run_id"]),
        root_run_id=str(row["root_run_id"]),
        seq=row["seq"],
        created_at=row["created_at"],
        event=event_from_payload(
            row["type"],
            agent_name=row["agent_name"],
            is_internal=row["is_internal"],
            payload=row["payload"],
        ),
    )


async def append_events(
    conn: asyncpg.Connection,
    *,
    project_id: str,
    run_id: str,
    root_run_id: str,
    events: Sequence[RunEvent],
) -> list[PersistedEvent]:
    """Appends ``events`` to the run with the next gapless seqs and NOTIFYs listeners.

    One statement in the caller's transaction (or its own, outside one), so a step's
    messages, tool calls and events commit together; the NOTIFY is delivered at commit,
    never for a rollback. Concurrent appenders to one run queue on the run row's lock until
    the holder commits, so seqs never collide and never skip. Returns the events as stored
    (what a replay yields). :class:`NotFound` if the run is not in the project.
    """
    if not events:
        return []
    rows = await conn.fetch(
        _INSERT_EVENTS,
        run_id,
        project_id,
        root_run_id,
        [e.type for e in events],
        [e.agent_name for e in events],
        [e.is_internal for e in events],
        [event_payload(e) for e in events],
        CHANNEL,
    )
    if not rows:
        raise NotFound(f"run {run_id} not found in project {project_id!r}")
    return sorted((persisted_from_row(row) for row in rows), key=lambda p: p.seq)


async def read_events(
    conn: Connection,
    *,
    project_id: str,
    run_id: str,
    after_seq: int = 0,
    include_internal: bool = False,
    limit: int = 1000,
) -> list[PersistedEvent]:
    """The run's events with seq > ``after_seq`` in seq order, at most ``limit``.

    Empty for a run of another project (callers check existence separately)."""
    rows = await conn.fetch(_SELECT_EVENTS, run_id, project_id, after_seq, include_internal, limit)
    return [persisted_from_row(row) for row in rows]


def parse_notification(payload: str) -> tuple[str, int] | None:
    """``"<run_id>:<seq>"`` -> (run_id, seq); None for anything else."""
    run_id, sep, seq = payload.rpartition(":")
    if not sep or not seq.isdigit():
        return None
    return run_id, int(seq)


# -- in-process fan-out -----------------------------------------------------------------


class EventStreamLagged(Exception):
    """A subscriber fell more than its queue behind; read the rest with :func:`read_events`
    after ``last_seq`` (the last event it was given)."""

    def __init__(self, run_id: str, last_seq: int) -> None:
        super().__init__(f"subscriber of run {run_id} lagged behind after seq {last_seq}")
        self.run_id = run_id
        self.last_seq = last_seq


class Subscription:
    """Live events of one run, in publish order. Iterating ends after RUN_FINISHED
    (``until_finished``) or when the hub closes; raises :class:`EventStreamLagged` if the
    bounded queue overflowed."""

    def __init__(self, run_id: str, *, maxsize: int, until_finished: bool) -> None:
        self.run_id = run_id
        self._queue: asyncio.Queue[PersistedEvent | None] = asyncio.Queue(maxsize)
        self._until_finished = until_finished
        self.last_seq = 0
        self.lagged = False

    def _offer(self, persisted: PersistedEvent) -> None:
        if self.lagged:
            return
        try:
            self._queue.put_nowait(persisted)
        except asyncio.QueueFull:
            self.lagged = True
            self._wake()

    def _wake(self) -> None:
        # Make room for the end marker: the reader raises or stops at it either way.
        with contextlib.suppress(asyncio.QueueEmpty):
            if self._queue.full():
                self._queue.get_nowait()
        self._queue.put_nowait(None)

    def __aiter__(self) -> AsyncIterator[PersistedEvent]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[PersistedEvent]:
        while True:
            if self.lagged:
                raise EventStreamLagged(self.run_id, self.last_seq)
            item = await self._queue.get()
            if item is None:
                if self.lagged:
                    raise EventStreamLagged(self.run_id, self.last_seq)
                return
            self.last_seq = item.seq
            yield item
            if self._until_finished and item.is_terminal:
                return


class EventHub:
    """In-process fan-out of persisted events by run id.

    Publish after the transaction that appended the events has committed, in seq order.
    ``publish`` never blocks: a slow subscriber whose queue is full is cut off with
    :class:`EventStreamLagged` rather than slowing the run down.
    """

    def __init__(self, *, queue_size: int = 1024) -> None:
        self._queue_size = queue_size
        self._subscribers: dict[str, set[Subscription]] = {}

    def publish(self, persisted: PersistedEvent | Iterable[PersistedEvent]) -> None:
        """Hands one event (or several, in order) to the run's current subscribers."""
        batch = [persisted] if isinstance(persisted, PersistedEvent) else list(persisted)
        for item in batch:
            for subscription in list(self._subscribers.get(item.run_id, ())):
                subscription._offer(item)

    @contextlib.contextmanager
    def subscribe(self, run_id: str, *, until_finished: bool = True) -> Iterator[Subscription]:
        """``with hub.subscribe(run_id) as events: async for e in events: ...``

        Subscribe before starting the work whose events you want, so none is missed.
        """
        subscription = Subscription(run_id, maxsize=self._queue_size, until_finished=until_finished)
        self._subscribers.setdefault(run_id, set()).add(subscription)
        try:
            yield subscription
        finally:
            subscribers = self._subscribers.get(run_id)
            if subscribers is not None:
                subscribers.discard(subscription)
                if not subscribers:
                    del self._subscribers[run_id]

    def subscriber_count(self, run_id: str) -> int:
        """How many subscriptions the run has (for tests and metrics)."""
        return len(self._subscribers.get(run_id, ()))

    def close(self) -> None:
        """Ends every subscription's iteration (shutdown)."""
        for subscribers in self._subscribers.values():
            for subscription in subscribers:
                subscription._wake()
