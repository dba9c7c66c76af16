"""The dispatcher's values (tasks, graphs, sessions as stored in graph objects) and their
protobuf forms. Property names here are the storage contract shared with ``create_subtasks``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from google.protobuf import duration_pb2, struct_pb2

from agentfleet.graph import (
    FOLLOWS_UP,
    HAS_SESSION,
    INFORMED_BY,
    SESSION,
    TASK_GRAPH,
    GraphObject,
)
from agentfleet.graph.task_properties import (
    task_max_retries,
    task_priority,
    task_timeout_s,
    whole_number,
)
from agentfleet.timestamps import timestamp_proto
from agentfleet.v1 import dispatcher_pb2

# TASK_GRAPH, SESSION and the session edge types are the reserved names of
# agentfleet.graph.reserved, re-exported for the dispatcher's modules.
__all__ = [
    "FOLLOWS_UP",
    "GRAPH_STATUS",
    "HAS_SESSION",
    "INFORMED_BY",
    "SESSION",
    "TASK_GRAPH",
    "TASK_STATUS",
    "Counts",
    "TaskView",
    "iso_now",
    "session_to_proto",
    "task_to_proto",
]


TASK_STATUS = {
    "pending": dispatcher_pb2.TASK_STATUS_PENDING,
    "in_progress": dispatcher_pb2.TASK_STATUS_IN_PROGRESS,
    "completed": dispatcher_pb2.TASK_STATUS_COMPLETED,
    "failed": dispatcher_pb2.TASK_STATUS_FAILED,
    "paused": dispatcher_pb2.TASK_STATUS_PAUSED,
    "cancelled": dispatcher_pb2.TASK_STATUS_CANCELLED,
}
GRAPH_STATUS = {
    "active": dispatcher_pb2.TASK_GRAPH_STATUS_ACTIVE,
    "completed": dispatcher_pb2.TASK_GRAPH_STATUS_COMPLETED,
    "failed": dispatcher_pb2.TASK_GRAPH_STATUS_FAILED,
    "paused": dispatcher_pb2.TASK_GRAPH_STATUS_PAUSED,
    "cancelled": dispatcher_pb2.TASK_GRAPH_STATUS_CANCELLED,
}
GRAPH_STATUS_NAMES = {v: k for k, v in GRAPH_STATUS.items()}
SELECTION = {
    "assigned": dispatcher_pb2.SELECTION_METHOD_ASSIGNED,
    "tag_rule": dispatcher_pb2.SELECTION_METHOD_TAG_RULE,
    "llm": dispatcher_pb2.SELECTION_METHOD_LLM,
    "default_agent": dispatcher_pb2.SELECTION_METHOD_DEFAULT_AGENT,
}
OUTCOME = {
    # A session's own status is seed 002's "active" while its attempt runs; sessions stored
    # before that said "in_progress".
    "active": dispatcher_pb2.SESSION_OUTCOME_IN_PROGRESS,
    "in_progress": dispatcher_pb2.SESSION_OUTCOME_IN_PROGRESS,
    "completed": dispatcher_pb2.SESSION_OUTCOME_COMPLETED,
    "failed": dispatcher_pb2.SESSION_OUTCOME_FAILED,
    "paused": dispatcher_pb2.SESSION_OUTCOME_PAUSED,
    "cancelled": dispatcher_pb2.SESSION_OUTCOME_CANCELLED,
    "rejected": dispatcher_pb2.SESSION_OUTCOME_REJECTED,
}
TERMINAL_GRAPH = frozenset({"completed", "failed", "paused", "cancelled"})


def iso_now() -> str:
    return datetime.now(UTC).isoformat()


@dataclass(kw_only=True, slots=True)
class Counts:
    """Tasks of a graph per status, plus blocked (pending behind a dead end) and available."""

    by_status: dict[str, int] = field(default_factory=dict)
    blocked: int = 0
    available: int = 0

    @property
    def total(self) -> int:
        return sum(self.by_status.values())

    def to_proto(self) -> dispatcher_pb2.TaskCounts:
        get = self.by_status.get
        return dispatcher_pb2.TaskCounts(
            total=self.total,
            pending=get("pending", 0),
            in_progress=get("in_progress", 0),
            completed=get("completed", 0),
            failed=get("failed", 0),
            paused=get("paused", 0),
            cancelled=get("cancelled", 0),
            blocked=self.blocked,
        )


@dataclass(kw_only=True, slots=True)
class TaskView:
    """A SpecTask with what is computed from its neighbours."""

    object: GraphObject
    blocker_keys: list[str] = field(default_factory=list)
    blocked: bool = False

    @property
    def key(self) -> str:
        return str(self.object.properties.get("key", ""))


def task_to_proto(view: TaskView) -> dispatcher_pb2.Task:
    obj = view.object
    p = obj.properties
    spec = dispatcher_pb2.TaskSpec(
        key=str(p.get("key", "")),
        title=str(p.get("title", "")),
        description=str(p.get("description", "")),
        assigned_agent=str(p.get("assigned_agent") or ""),
        tags=[str(t) for t in p.get("tags") or [] if isinstance(p.get("tags"), list)],
        priority=task_priority(p),
        max_retries=task_max_retries(p),
    )
    timeout_s = task_timeout_s(p)
    if timeout_s:
        spec.timeout.CopyFrom(duration_pb2.Duration(seconds=int(timeout_s)))
    if isinstance(p.get("context"), dict) and p["context"]:
        extra = struct_pb2.Struct()
        extra.update(p["context"])
        spec.properties.CopyFrom(extra)
    status = str(p.get("status", "pending"))
    task = dispatcher_pb2.Task(
        id=obj.id,
        task_graph_id=str(p.get("graph_id", "")),
        spec=spec,
        status=TASK_STATUS.get(status, dispatcher_pb2.TASK_STATUS_UNSPECIFIED),
        attempts=_count(p.get("attempts")),
        last_run_id=str(p.get("run_id") or ""),
        summary=str(p.get("summary") or "") if status == "completed" else "",
        error_message=str(p.get("error_message") or ""),
        blocker_keys=view.blocker_keys,
        blocked=view.blocked,
        created_by_run_id=str(p.get("created_by_run_id") or ""),
        escalated=status == "paused" and p.get("escalated") is True,
        version=obj.version,
    )
    for name, value in (
        ("create_time", obj.created_at),
        ("update_time", obj.updated_at),
        ("start_time", p.get("start_time")),
        ("complete_time", p.get("complete_time")),
    ):
        stamp = timestamp_proto(value)
        if stamp is not None:
            getattr(task, name).CopyFrom(stamp)
    return task


def session_to_proto(obj: GraphObject) -> dispatcher_pb2.TaskSession:
    p = obj.properties
    session = dispatcher_pb2.TaskSession(
        id=obj.id,
        task_id=str(p.get("task_id", "")),
        task_key=str(p.get("task_key", "")),
        attempt=_count(p.get("attempt")),
        run_id=str(p.get("run_id") or ""),
        agent_name=str(p.get("agent_name", "")),
        chosen_by=SELECTION.get(str(p.get("chosen_by")), 0),
        reason=str(p.get("reason", "")),
        outcome=OUTCOME.get(str(p.get("status")), 0),
        summary=str(p.get("summary") or ""),
        error_message=str(p.get("error_message") or ""),
        evaluation=str(p.get("evaluation") or ""),
        follows_up_session_id=str(p.get("follows_up_session_id") or ""),
        triage_decision=str(p.get("triage_decision") or ""),
        triage_reason=str(p.get("triage_reason") or ""),
        message_count=whole_number(p.get("message_count"), 0, 2**31 - 1) or 0,
        tokens_in=whole_number(p.get("tokens_in"), 0, 2**63 - 1) or 0,
        tokens_out=whole_number(p.get("tokens_out"), 0, 2**63 - 1) or 0,
        informed_by_session_ids=[str(s) for s in p.get("informed_by", [])],
        resume_count=_count(p.get("resume_count")),
    )
    session.create_time.CopyFrom(timestamp_proto(obj.created_at))
    stamp = timestamp_proto(p.get("complete_time"))
    if stamp is not None:
        session.complete_time.CopyFrom(stamp)
    return session


def _count(value: object) -> int:
    """A counter property (attempts, resume_count) as written by the dispatcher; 0 when a
    stored value is not a non-negative whole number."""
    return whole_number(value, 0, 2**31 - 1) or 0
