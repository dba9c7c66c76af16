"""Repository rows -> history protobuf messages, and message previews."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from google.protobuf import duration_pb2, struct_pb2

from agentfleet.events import run_status_proto, tool_source_proto, waiting_for_proto
from agentfleet.events.proto import remote_run_proto
from agentfleet.timestamps import duration_proto, timestamp_proto
from agentfleet.v1 import common_pb2, history_pb2
from services.history.latency import Latency
from services.history.models import (
    AgentInfo,
    MessageRow,
    RunOverview,
    StatsRow,
    ToolCallOverview,
    ToolCallRow,
    TreeRow,
)

TRUNCATION_MARKER = "…[truncated]"


def _ms(value: float | None) -> duration_pb2.Duration | None:
    if value is None:
        return None
    duration = duration_pb2.Duration()
    duration.FromTimedelta(timedelta(milliseconds=value))
    return duration


def _struct(value: Mapping[str, Any] | None) -> struct_pb2.Struct | None:
    if value is None:
        return None
    struct = struct_pb2.Struct()
    # A jsonb document that is not an object (a bare string or list) is wrapped, not lost.
    struct.update(value if isinstance(value, Mapping) else {"value": value})
    return struct


def _id(value: Any) -> str:
    return "" if value is None else str(value)


def _tool_status(status: str) -> int:
    return common_pb2.ToolCallStatus.Value("TOOL_CALL_STATUS_" + status.upper())


def _same(row: object, names: str) -> dict[str, Any]:
    """The fields ``names`` (space-separated) of ``row``, for a message that names and types
    them as the row does."""
    return {name: getattr(row, name) for name in names.split()}


def _run(row: RunOverview | TreeRow) -> dict[str, Any]:
    """What RunSummary and RunTreeNode both say of a run (but its id: their names differ)."""
    return {
        **_same(row, "agent_name depth total_steps tokens_in tokens_out cost_nanos"),
        "status": run_status_proto(row.status),
        "parent_run_id": _id(row.parent_run_id),
        "duration": _ms(row.duration_ms),
        "create_time": timestamp_proto(row.created_at),
    }


def run_summary(row: RunOverview) -> history_pb2.RunSummary:
    """A RunSummary from an overview row."""
    summary = history_pb2.RunSummary(
        **_run(row),
        **_same(row, "resume_count input_preview input_truncated"),
        id=str(row.id),
        root_run_id=_id(row.root_run_id),
        task_id=_id(row.task_id),
        complete_time=timestamp_proto(row.completed_at),
        labels={str(k): str(v) for k, v in row.labels.items()},
        thread_id=row.thread_id or "",
        started_by=row.started_by or "rpc",
        chain_depth=row.chain_depth or 0,
    )
    if row.remote_agent:
        summary.remote.CopyFrom(remote_run_proto(row.remote_agent))
    return summary


def agent_summary(name: str, info: AgentInfo | None) -> common_pb2.AgentSummary:
    """The run's agent as currently defined; ``exists`` false once deleted."""
    if info is None:
        return common_pb2.AgentSummary(name=name, exists=False)
    return common_pb2.AgentSummary(
        name=info.name,
        description=info.description,
        flow_type=common_pb2.FlowType.Value("FLOW_TYPE_" + info.flow_type.upper()),
        visibility=common_pb2.Visibility.Value("VISIBILITY_" + info.visibility.upper()),
        tools=info.tools,
        model_name=str(info.model.get("name", "")),
        product_name=info.product_name or "",
        exists=True,
    )


def _render_part(part: Mapping[str, Any]) -> tuple[str, str | None]:
    """(text, function name) of one Gemini part; snake_case or camelCase JSON."""
    if part.get("text") is not None:
        return str(part["text"]), None
    call = part.get("function_call") or part.get("functionCall")
    if call:
        args = json.dumps(call.get("args") or {}, ensure_ascii=False, separators=(",", ":"))
        return f"{call.get('name', '')}({args})", call.get("name")
    response = part.get("function_response") or part.get("functionResponse")
    if response:
        body = json.dumps(response.get("response"), ensure_ascii=False, separators=(",", ":"))
        return f"{response.get('name', '')} -> {body}", response.get("name")
    return "", None


def message_preview(content: Mapping[str, Any], chars: int) -> tuple[str, bool, list[str]]:
    """(preview, truncated, function names) of a Gemini Content document."""
    texts: list[str] = []
    names: list[str] = []
    for part in content.get("parts") or ():
        if isinstance(part, Mapping):
            text, name = _render_part(part)
            if text:
                texts.append(text)
            if name:
                names.append(name)
    full = "\n".join(texts)
    if len(full) <= chars:
        return full, False, names
    return full[:chars] + TRUNCATION_MARKER, True, names


def _role(role: str) -> int:
    return common_pb2.MessageRole.Value("MESSAGE_ROLE_" + role.upper())


def _message(row: MessageRow) -> dict[str, Any]:
    """What MessageSummary and RunMessage both say of a message."""
    return {
        **_same(row, "seq agent_name tokens is_internal cost_nanos"),
        "model_name": row.model_name or "",
        "id": str(row.id),
        "run_id": str(row.run_id),
        "step": row.step_number,
        "role": _role(row.role),
        "create_time": timestamp_proto(row.created_at),
    }


def message_summary(row: MessageRow, *, preview_chars: int) -> history_pb2.MessageSummary:
    """A MessageSummary with the content cut to ``preview_chars``."""
    preview, truncated, names = message_preview(row.content, preview_chars)
    return history_pb2.MessageSummary(
        **_message(row),
        preview=preview,
        truncated=truncated,
        size_bytes=row.size_bytes,
        function_names=names,
    )


def run_message(row: MessageRow) -> history_pb2.RunMessage:
    """A RunMessage with its full content."""
    return history_pb2.RunMessage(**_message(row), content=_struct(row.content))


def _tool_call(row: ToolCallOverview | ToolCallRow) -> dict[str, Any]:
    """What ToolCallSummary and ToolCall both say of a tool call."""
    return {
        **_same(row, "tool_call_id tool_name"),
        "id": str(row.id),
        "run_id": str(row.run_id),
        "step": row.step_number,
        "source": tool_source_proto(row.source),
        "status": _tool_status(row.status),
        "duration": _ms(row.duration_ms),
        "child_run_ids": [str(c) for c in row.child_run_ids],
        "create_time": timestamp_proto(row.created_at),
    }


def tool_call_summary(row: ToolCallOverview) -> history_pb2.ToolCallSummary:
    """A ToolCallSummary (no input or output)."""
    return history_pb2.ToolCallSummary(
        **_tool_call(row),
        **_same(row, "input_size_bytes output_size_bytes"),
        error_preview=row.error_preview or "",
    )


def tool_call(row: ToolCallRow) -> history_pb2.ToolCall:
    """A ToolCall with its full input and output."""
    return history_pb2.ToolCall(
        **_tool_call(row),
        message_id=_id(row.message_id),
        input=_struct(row.input),
        output=_struct(row.output),
        error=row.error or "",
        complete_time=timestamp_proto(row.completed_at),
    )


def tree_node(row: TreeRow) -> history_pb2.RunTreeNode:
    """One node of GetRunTree."""
    node = history_pb2.RunTreeNode(
        **_run(row),
        **_same(row, "step_count tokens_total_tree cost_total_tree_nanos"),
        run_id=str(row.id),
        summary_preview=row.summary_preview or "",
        started_by=row.started_by or "rpc",
        chain_depth=row.chain_depth or 0,
    )
    if row.trigger_origin:
        node.trigger_origin.update(row.trigger_origin)
    if row.quota_wait is not None and row.quota_wait_since is not None:
        node.waiting_for.CopyFrom(waiting_for_proto(row.quota_wait, row.quota_wait_since))
    if row.remote_agent:
        node.remote.CopyFrom(remote_run_proto(row.remote_agent))
    return node


def agent_stats(
    row: StatsRow, *, start: datetime, end: datetime, latency: Latency | None = None
) -> history_pb2.AgentStats:
    """AgentStats; success rate over the runs that stopped."""
    stopped = row.completed + row.failed + row.cancelled + row.paused
    stats = history_pb2.AgentStats(
        **_same(row, "agent_name total_runs queued running completed failed cancelled paused"),
        **_same(row, "tokens_in tokens_out cost_nanos mean_steps resumes task_retries"),
        window_start=timestamp_proto(start),
        window_end=timestamp_proto(end),
        success_rate=row.completed / stopped if stopped else 0.0,
        p50_duration=_ms(row.p50_ms),
        p95_duration=_ms(row.p95_ms),
    )
    if latency is not None:
        stats.latency_runs = latency.runs
        for field, value in (
            ("p50_step_duration", latency.step_p50_s),
            ("p95_step_duration", latency.step_p95_s),
            ("p50_model_call_duration", latency.model_p50_s),
            ("p95_model_call_duration", latency.model_p95_s),
        ):
            if value is not None:
                getattr(stats, field).CopyFrom(duration_proto(value))
    return stats
