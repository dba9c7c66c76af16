"""Run events (DESIGN §4 "Streaming", §5; seed 004), one module per concept:

- :mod:`~agentfleet.events.domain`: the event dataclasses (a union tagged by ``type``,
  mirroring the ``RunEvent.payload`` oneof) and their jsonb payload;
- :mod:`~agentfleet.events.proto`: runs and events as protobuf (``AgentRun``, ``RunEvent``);
- :mod:`~agentfleet.events.store`: ``kb.agent_run_events``, appended with gapless seqs and a
  NOTIFY at commit, read back in seq order (statements in ``run_events.sql``);
- :mod:`~agentfleet.events.delta`: MODEL_TEXT_DELTA, the transient pieces of a streamed reply.

Live streams and replays are identical because both are built from stored rows:
:func:`append_events` returns the rows as the database returned them, and :func:`to_proto`
is the only way either becomes a ``RunEvent``. ``from agentfleet import events`` gives the
names below.
"""

from agentfleet.events.domain import (
    ChildRunFinished,
    ChildRunStarted,
    ModelQuotaWait,
    ModelText,
    PersistedEvent,
    RemoteStatus,
    RunEvent,
    RunFinished,
    RunQueued,
    RunStarted,
    RunStatusName,
    Safety,
    SafetyKindName,
    StatusChanged,
    ToolCallStatusName,
    ToolRequest,
    ToolResponse,
    event_from_payload,
    event_payload,
)
from agentfleet.events.notifier import RunEventNotifier
from agentfleet.events.proto import (
    ANSWERED_MODEL,
    agent_run_to_proto,
    from_proto,
    quota_wait_message,
    run_snapshot,
    run_status_name,
    run_status_proto,
    to_proto,
    tool_source_name,
    tool_source_proto,
    waiting_for_proto,
)
from agentfleet.events.store import (
    CHANNEL,
    STATEMENTS,
    append_events,
    event_columns,
    events_statement,
    parse_notification,
    persisted_from_row,
    read_events,
)

__all__ = [
    "ANSWERED_MODEL",
    "CHANNEL",
    "STATEMENTS",
    "ChildRunFinished",
    "ChildRunStarted",
    "ModelQuotaWait",
    "ModelText",
    "PersistedEvent",
    "RemoteStatus",
    "RunEvent",
    "RunEventNotifier",
    "RunFinished",
    "RunQueued",
    "RunStarted",
    "RunStatusName",
    "Safety",
    "SafetyKindName",
    "StatusChanged",
    "ToolCallStatusName",
    "ToolRequest",
    "ToolResponse",
    "agent_run_to_proto",
    "append_events",
    "event_columns",
    "event_from_payload",
    "event_payload",
    "events_statement",
    "from_proto",
    "parse_notification",
    "persisted_from_row",
    "quota_wait_message",
    "read_events",
    "run_snapshot",
    "run_status_name",
    "run_status_proto",
    "to_proto",
    "tool_source_name",
    "tool_source_proto",
    "waiting_for_proto",
]
