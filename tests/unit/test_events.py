"""Pure parts of agentfleet.events: payload codec, protobuf conversion, notifications."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from agentfleet import events as ev
from agentfleet.v1 import common_pb2

RUN_ID = str(uuid.uuid4())
NOW = datetime(2026, 11, 21, 12, 0, 0, 123456, tzinfo=UTC)
RUN_ROW = {
    "id": uuid.UUID(RUN_ID),
    "project_id": "p",
    "agent_name": "writer",
    "status": "completed",
    "input": "hi",
    "summary": "done",
    "parent_run_id": None,
    "root_run_id": uuid.UUID(RUN_ID),
    "depth": 0,
    "step_count": 3,
    "total_steps": 3,
    "max_steps": 10,
    "tokens_in": 5_000_000_000,
    "labels": {"team": "a"},
    "created_at": NOW,
    "started_at": NOW,
    "completed_at": NOW + timedelta(seconds=2),
    "duration_ms": 2000,
    "timeout": timedelta(minutes=5),
}

ONE_OF_EACH: list[ev.RunEvent] = [
    ev.RunQueued(agent_name="writer", run=ev.run_snapshot({**RUN_ROW, "status": "queued"})),
    ev.RunStarted(agent_name="writer", model_name="m", tool_names=("a", "b"), resumed=True),
    ev.ModelText(agent_name="writer", text="hmm", step=1, thought=True),
    ev.ToolRequest(
        agent_name="writer",
        tool_call_id="c1",
        tool_name="srv__x",
        arguments={"q": "v", "n": 2.5},
        step=1,
        source="mcp:srv",
    ),
    ev.ToolResponse(
        agent_name="writer",
        tool_call_id="c1",
        tool_name="srv__x",
        status="refused",
        error="not allowed",
        step=1,
    ),
    ev.ChildRunStarted(
        agent_name="writer", is_internal=True, child_run_id=RUN_ID, child_agent_name="helper"
    ),
    ev.ChildRunFinished(
        agent_name="writer",
        child_run_id=RUN_ID,
        child_agent_name="helper",
        status="failed",
        error_message="x",
    ),
    ev.Safety(agent_name="writer", kind="step_limit", message="limit", details={"max_steps": 10.0}),
    ev.StatusChanged(agent_name="writer", from_status="running", to_status="paused", reason="r"),
    ev.ModelQuotaWait(
        agent_name="writer",
        waiting=True,
        model="gemini-2.5-pro",
        limit="requests_per_minute",
        expected_wait_s=12.25,
        step=2,
        message="waiting for model quota: gemini-2.5-pro, about 12 s",
    ),
    ev.ModelQuotaWait(
        agent_name="writer",
        waiting=False,
        model="gemini-2.5-pro",
        limit="requests_per_minute",
        expected_wait_s=12.25,
        step=2,
        waited_s=11.5,
        message="model quota wait over",
    ),
    ev.RemoteStatus(agent_name="writer", state="input_required", task_id="t-1", step=3),
    ev.RunFinished(agent_name="writer", run=ev.run_snapshot(RUN_ROW)),
]


def _persisted(event: ev.RunEvent, seq: int = 1, run_id: str = RUN_ID) -> ev.PersistedEvent:
    return ev.PersistedEvent(
        run_id=run_id, root_run_id=RUN_ID, seq=seq, created_at=NOW, event=event
    )


@pytest.mark.parametrize("event", ONE_OF_EACH, ids=lambda e: e.type)
def test_payload_round_trips(event: ev.RunEvent) -> None:
    payload = ev.event_payload(event)
    assert "type" not in payload
    assert "agent_name" not in payload
    back = ev.event_from_payload(
        event.type, agent_name=event.agent_name, is_internal=event.is_internal, payload=payload
    )
    assert back == event


@pytest.mark.parametrize("event", ONE_OF_EACH, ids=lambda e: e.type)
def test_proto_round_trips(event: ev.RunEvent) -> None:
    message = ev.to_proto(_persisted(event, seq=7), parent_run_id="", trace_id="ab" * 16)
    assert message.WhichOneof("payload") is not None
    assert message.seq == 7
    assert message.agent_name == "writer"
    assert message.is_internal == event.is_internal
    assert ev.from_proto(message) == _persisted(event, seq=7)


def test_run_snapshot_carries_the_run() -> None:
    message = ev.to_proto(_persisted(ONE_OF_EACH[-1]), parent_run_id=None, trace_id=None)
    run = message.run_finished.run
    assert run.status == common_pb2.RUN_STATUS_COMPLETED
    assert run.tokens_in == 5_000_000_000
    assert run.max_steps == 10
    assert run.HasField("max_steps")
    assert not run.HasField("max_tokens")
    assert run.duration.ToMilliseconds() == 2000
    assert run.timeout.ToTimedelta() == timedelta(minutes=5)
    assert run.labels == {"team": "a"}
    assert message.type == common_pb2.RUN_EVENT_TYPE_RUN_FINISHED


def test_a_waiting_run_says_what_for_and_since_when() -> None:
    run = ev.agent_run_to_proto(
        {
            **RUN_ROW,
            "status": "running",
            "quota_wait": {
                "model": "gemini-2.5-pro",
                "limit": "tokens_per_minute",
                "expected_wait_s": 11.6,
            },
            "quota_wait_since": NOW,
        }
    )
    waiting = run.waiting_for
    assert waiting.message == "waiting for model quota: gemini-2.5-pro, about 12 s"
    assert (waiting.model, waiting.limit) == ("gemini-2.5-pro", "tokens_per_minute")
    assert waiting.expected_wait.ToTimedelta() == timedelta(seconds=11.6)
    assert waiting.since.ToDatetime(tzinfo=UTC) == NOW
    assert not ev.agent_run_to_proto(RUN_ROW).HasField("waiting_for")


def test_unknown_types_and_keys() -> None:
    with pytest.raises(ValueError, match="unknown run event type"):
        ev.event_from_payload("nope", agent_name="a", is_internal=False, payload={})
    newer = ev.event_from_payload(
        "model_text",
        agent_name="a",
        is_internal=False,
        payload={"text": "t", "step": 1, "added_later": 1},
    )
    assert newer == ev.ModelText(agent_name="a", text="t", step=1)


def test_parse_notification() -> None:
    assert ev.parse_notification(f"{RUN_ID}:12") == (RUN_ID, 12)
    assert ev.parse_notification("garbage") is None
    assert ev.parse_notification(f"{RUN_ID}:x") is None
