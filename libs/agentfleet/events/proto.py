"""Runs and run events as protobuf: ``AgentRun`` from a run row, ``RunEvent`` <-> domain.

:func:`to_proto` is the only way a stored event becomes a ``RunEvent``, live or replayed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from google.protobuf import json_format

from agentfleet.events import domain
from agentfleet.structs import message_dict, struct_dict, to_struct
from agentfleet.timestamps import timestamp_proto
from agentfleet.v1 import common_pb2

# -- runs as protobuf -------------------------------------------------------------------


def _proto_time(value: datetime | timedelta | None) -> Any:
    """A protobuf Duration of a timedelta, a Timestamp of a datetime; None for None."""
    if value is None:
        return None
    if isinstance(value, timedelta):
        duration = common_pb2.google_dot_protobuf_dot_duration__pb2.Duration()
        duration.FromTimedelta(value)
        return duration
    return timestamp_proto(value)


def run_status_proto(status: str) -> int:
    """``"completed"`` -> ``RUN_STATUS_COMPLETED``."""
    return common_pb2.RunStatus.Value("RUN_STATUS_" + status.upper())


def run_status_name(status: int) -> str:
    """``RUN_STATUS_COMPLETED`` -> ``"completed"``."""
    return common_pb2.RunStatus.Name(status).removeprefix("RUN_STATUS_").lower()


ANSWERED_MODEL = (
    "(SELECT m.model_name FROM kb.agent_run_messages m WHERE m.run_id = r.id "
    "AND m.model_name IS NOT NULL ORDER BY m.seq DESC LIMIT 1) AS answered_model"
)
"""A select-list item of a ``kb.agent_runs r`` row: the model of the run's latest model
message, which :func:`agent_run_to_proto` gives as ``model_name`` (a fallback model may have
answered instead of the definition's, so the definition cannot say)."""


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
        cost_nanos=get("cost_nanos") or 0,
        cost_total_tree_nanos=get("cost_total_tree_nanos") or 0,
        trace_id=get("trace_id") or "",
        task_id=str(get("task_id") or ""),
        request_id=get("request_id") or "",
        thread_id=get("thread_id") or "",
        started_by=get("started_by") or "rpc",
        chain_depth=get("chain_depth") or 0,
        model_name=get("answered_model") or "",
        labels={str(k): str(v) for k, v in (get("labels") or {}).items()},
    )
    if get("max_steps") is not None:
        run.max_steps = row["max_steps"]
    if get("max_tokens") is not None:
        run.max_tokens = row["max_tokens"]
    if get("max_tree_cost_nanos") is not None:
        run.max_tree_cost_nanos = row["max_tree_cost_nanos"]
    if get("output") is not None:
        run.output.update(row["output"])
    if get("trigger_origin") is not None:
        run.trigger_origin.update(row["trigger_origin"])
    optional_messages = {
        "timeout": _proto_time(get("timeout")),
        "create_time": _proto_time(get("created_at")),
        "start_time": _proto_time(get("started_at")),
        "complete_time": _proto_time(get("completed_at")),
        "cancel_request_time": _proto_time(get("cancel_requested_at")),
    }
    quota_wait = get("quota_wait")
    if quota_wait is not None and get("quota_wait_since") is not None:
        run.waiting_for.CopyFrom(waiting_for_proto(quota_wait, row["quota_wait_since"]))
    if get("duration_ms") is not None:
        optional_messages["duration"] = _proto_time(timedelta(milliseconds=row["duration_ms"]))
    for name, value in optional_messages.items():
        if value is not None:
            getattr(run, name).CopyFrom(value)
    remote = get("remote_agent")
    if remote:
        run.remote.CopyFrom(remote_run_proto(remote))
    return run


def remote_run_proto(remote: Mapping[str, Any]) -> common_pb2.RemoteRun:
    """``RemoteRun`` of a run row's ``remote_agent`` (a remote A2A child)."""
    return common_pb2.RemoteRun(
        **{
            name: str(remote.get(name) or "")
            for name in ("name", "card_url", "url", "card_name", "task_id", "context_id")
        }
    )


def quota_wait_message(model: str, expected_wait_s: float) -> str:
    """What a person reads about a run waiting for its model's quota."""
    seconds = round(expected_wait_s) if math.isfinite(expected_wait_s) else 0
    return f"waiting for model quota: {model}, about {max(1, seconds)} s"


def waiting_for_proto(quota_wait: Mapping[str, Any], since: datetime) -> common_pb2.RunWaitingFor:
    """``AgentRun.waiting_for`` of a run row's ``quota_wait`` and ``quota_wait_since``."""
    model = str(quota_wait.get("model", ""))
    expected = quota_wait.get("expected_wait_s")
    expected_s = float(expected) if isinstance(expected, int | float) else 0.0
    waiting = common_pb2.RunWaitingFor(
        message=quota_wait_message(model, expected_s),
        model=model,
        limit=str(quota_wait.get("limit", "")),
        since=timestamp_proto(since),
    )
    waiting.expected_wait.CopyFrom(_proto_time(timedelta(seconds=expected_s)))
    return waiting


def run_snapshot(row: Mapping[str, Any]) -> dict[str, Any]:
    """The ``run`` of RunQueued / RunFinished: a run row as AgentRun JSON (proto field names)."""
    return message_dict(agent_run_to_proto(row), preserving_proto_field_name=True)


RUN_ROW_TIMES = (
    "created_at",
    "started_at",
    "completed_at",
    "cancel_requested_at",
    "lease_expires_at",
    "quota_wait_since",
    "waiting_since",
)
"""The timestamp columns of ``kb.agent_runs``, which ``to_jsonb`` gives as ISO 8601 text."""


def run_snapshot_of_json(row: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`run_snapshot` of a run row as PostgreSQL's ``to_jsonb`` gives it, with
    ``timeout_s`` (the timeout in seconds) beside it: how the executor's finish stores its
    RUN_FINISHED (``run_events.sql``, fragment insert_events)."""
    values = dict(row)
    for name in RUN_ROW_TIMES:
        if values.get(name) is not None:
            values[name] = datetime.fromisoformat(values[name])
    seconds = values.pop("timeout_s", None)
    values["timeout"] = None if seconds is None else timedelta(seconds=seconds)
    return run_snapshot(values)


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
    "model_quota_wait": "model_quota_wait",
    "remote_status": "remote_status",
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


def _payload_proto(event: domain.RunEvent) -> Any:
    match event:
        case domain.RunQueued(run=run):
            return common_pb2.RunQueued(run=json_format.ParseDict(run, common_pb2.AgentRun()))
        case domain.RunFinished(run=run):
            return common_pb2.RunFinished(run=json_format.ParseDict(run, common_pb2.AgentRun()))
        case domain.RunStarted():
            return common_pb2.RunStarted(
                model_name=event.model_name,
                tool_names=event.tool_names,
                recovered=event.recovered,
                resumed=event.resumed,
                worker=event.worker,
            )
        case domain.ModelText():
            return common_pb2.ModelText(text=event.text, step=event.step, thought=event.thought)
        case domain.ToolRequest():
            return common_pb2.ToolRequest(
                tool_call_id=event.tool_call_id,
                tool_name=event.tool_name,
                arguments=to_struct(event.arguments),
                step=event.step,
                source=tool_source_proto(event.source),
            )
        case domain.ToolResponse():
            response = common_pb2.ToolResponse(
                tool_call_id=event.tool_call_id,
                tool_name=event.tool_name,
                status=common_pb2.ToolCallStatus.Value("TOOL_CALL_STATUS_" + event.status.upper()),
                error=event.error,
                step=event.step,
            )
            if event.result is not None:
                response.result.CopyFrom(to_struct(event.result))
            response.duration.CopyFrom(_proto_time(timedelta(milliseconds=event.duration_ms)))
            return response
        case domain.ChildRunEvent():
            return common_pb2.ChildRun(
                child_run_id=event.child_run_id,
                agent_name=event.child_agent_name,
                status=run_status_proto(event.status),
                summary=event.summary,
                error_message=event.error_message,
                description=event.description,
                tool_call_id=event.tool_call_id,
            )
        case domain.Safety():
            return common_pb2.Safety(
                kind=common_pb2.SafetyKind.Value("SAFETY_KIND_" + event.kind.upper()),
                message=event.message,
                details=to_struct(event.details),
                step=event.step,
            )
        case domain.StatusChanged():
            return common_pb2.StatusChanged(
                from_status=run_status_proto(event.from_status),
                to_status=run_status_proto(event.to_status),
                reason=event.reason,
            )
        case domain.ModelQuotaWait():
            wait = common_pb2.ModelQuotaWait(
                waiting=event.waiting,
                model=event.model,
                limit=event.limit,
                step=event.step,
                message=event.message,
            )
            wait.expected_wait.CopyFrom(_proto_time(timedelta(seconds=event.expected_wait_s)))
            if not event.waiting:
                wait.waited.CopyFrom(_proto_time(timedelta(seconds=event.waited_s)))
            return wait
        case domain.RemoteStatus():
            return common_pb2.RemoteStatus(
                state=event.state, task_id=event.task_id, step=event.step
            )
    raise TypeError(f"not a run event: {event!r}")


def to_proto(
    persisted: domain.PersistedEvent, *, parent_run_id: str | None, trace_id: str | None
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


def from_proto(message: common_pb2.RunEvent) -> domain.PersistedEvent:
    """The domain form of a ``RunEvent`` (inverse of :func:`to_proto`)."""
    type_ = common_pb2.RunEventType.Name(message.type).removeprefix("RUN_EVENT_TYPE_").lower()
    if not domain.is_event_type(type_):
        raise ValueError(f"RunEvent.type {message.type} is not an event type")
    body = getattr(message, _PROTO_FIELD[type_])
    values: dict[str, Any] = {}
    match type_:
        case "run_queued" | "run_finished":
            values["run"] = message_dict(body.run, preserving_proto_field_name=True)
        case "run_started":
            values = message_dict(body, preserving_proto_field_name=True)
        case "model_text":
            values = {"text": body.text, "step": body.step, "thought": body.thought}
        case "tool_request":
            values = {
                "tool_call_id": body.tool_call_id,
                "tool_name": body.tool_name,
                "arguments": struct_dict(body.arguments),
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
                "result": struct_dict(body.result) if body.HasField("result") else None,
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
                "details": struct_dict(body.details),
                "step": body.step,
            }
        case "status_changed":
            values = {
                "from_status": run_status_name(body.from_status),
                "to_status": run_status_name(body.to_status),
                "reason": body.reason,
            }
        case "model_quota_wait":
            values = {
                "waiting": body.waiting,
                "model": body.model,
                "limit": body.limit,
                "expected_wait_s": body.expected_wait.ToTimedelta().total_seconds(),
                "step": body.step,
                "waited_s": body.waited.ToTimedelta().total_seconds(),
                "message": body.message,
            }
        case "remote_status":
            values = {"state": body.state, "task_id": body.task_id, "step": body.step}
    event = domain.event_from_payload(
        type_, agent_name=message.agent_name, is_internal=message.is_internal, payload=values
    )
    return domain.PersistedEvent(
        run_id=message.run_id,
        root_run_id=message.root_run_id,
        seq=message.seq,
        created_at=message.create_time.ToDatetime(tzinfo=UTC),
        event=event,
    )
