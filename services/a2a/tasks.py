"""agentfleet runs and run events as A2A tasks, status updates and artifacts."""

from __future__ import annotations

from a2a.types import a2a_pb2 as a2a
from google.protobuf import struct_pb2

from agentfleet.v1 import common_pb2
from services.a2a.backend import output_of

S = common_pb2.RunStatus
T = common_pb2.RunEventType

STATES = {
    S.RUN_STATUS_QUEUED: a2a.TASK_STATE_SUBMITTED,
    S.RUN_STATUS_RUNNING: a2a.TASK_STATE_WORKING,
    S.RUN_STATUS_COMPLETED: a2a.TASK_STATE_COMPLETED,
    S.RUN_STATUS_FAILED: a2a.TASK_STATE_FAILED,
    S.RUN_STATUS_CANCELLED: a2a.TASK_STATE_CANCELED,
    # A paused run takes more input to continue; a waiting one, an approval decision.
    S.RUN_STATUS_PAUSED: a2a.TASK_STATE_INPUT_REQUIRED,
    S.RUN_STATUS_WAITING: a2a.TASK_STATE_INPUT_REQUIRED,
}
ANSWER_ARTIFACT = "answer"
OUTPUT_ARTIFACT = "output"


def task_of(run: common_pb2.AgentRun) -> a2a.Task:
    task = a2a.Task(id=run.id, context_id=run.thread_id, status=status_of(run))
    task.artifacts.extend(artifacts_of(run))
    return task


def status_of(run: common_pb2.AgentRun) -> a2a.TaskStatus:
    status = a2a.TaskStatus(state=STATES.get(run.status, a2a.TASK_STATE_UNSPECIFIED))
    note = _status_note(run)
    if note:
        status.message.CopyFrom(agent_message(run, note))
    if run.HasField("complete_time"):
        status.timestamp.CopyFrom(run.complete_time)
    return status


def artifacts_of(run: common_pb2.AgentRun) -> list[a2a.Artifact]:
    """The answer (the run's summary) and the structured output, once it completed."""
    if run.status != S.RUN_STATUS_COMPLETED:
        return []
    artifacts = [
        a2a.Artifact(
            artifact_id=f"{run.id}-{ANSWER_ARTIFACT}",
            name=ANSWER_ARTIFACT,
            parts=[a2a.Part(text=run.summary)],
        )
    ]
    output = output_of(run)
    if output is not None:
        value = struct_pb2.Value()
        value.struct_value.CopyFrom(run.output)
        artifacts.append(
            a2a.Artifact(
                artifact_id=f"{run.id}-{OUTPUT_ARTIFACT}",
                name=OUTPUT_ARTIFACT,
                parts=[a2a.Part(data=value, media_type="application/json")],
            )
        )
    return artifacts


def _event_message(event: common_pb2.RunEvent, context_id: str, text: str) -> a2a.Message:
    """The agent's message of one run event (its id names the event, so a repeat is one)."""
    return a2a.Message(
        message_id=f"{event.run_id}-{event.seq}",
        context_id=context_id,
        task_id=event.run_id,
        role=a2a.ROLE_AGENT,
        parts=[a2a.Part(text=text)],
    )


def agent_message(run: common_pb2.AgentRun, text: str) -> a2a.Message:
    return a2a.Message(
        message_id=f"{run.id}-{run.status}-{len(text)}",
        context_id=run.thread_id,
        task_id=run.id,
        role=a2a.ROLE_AGENT,
        parts=[a2a.Part(text=text)],
    )


def update_of(event: common_pb2.RunEvent, context_id: str) -> list[object]:
    """The A2A stream events for one run event (none for most)."""
    if event.type == T.RUN_EVENT_TYPE_RUN_STARTED:
        return [_status_update(event.run_id, context_id, a2a.TASK_STATE_WORKING)]
    if event.type == T.RUN_EVENT_TYPE_MODEL_TEXT and not event.model_text.thought:
        update = _status_update(event.run_id, context_id, a2a.TASK_STATE_WORKING)
        update.status.message.CopyFrom(_event_message(event, context_id, event.model_text.text))
        return [update]
    if event.type == T.RUN_EVENT_TYPE_STATUS_CHANGED and event.status_changed.to_status in (
        S.RUN_STATUS_PAUSED,
        S.RUN_STATUS_WAITING,
    ):
        update = _status_update(event.run_id, context_id, a2a.TASK_STATE_INPUT_REQUIRED)
        if event.status_changed.reason:
            update.status.message.CopyFrom(
                _event_message(event, context_id, event.status_changed.reason)
            )
        return [update]
    if event.type == T.RUN_EVENT_TYPE_RUN_FINISHED:
        run = event.run_finished.run
        updates: list[object] = [
            a2a.TaskArtifactUpdateEvent(
                task_id=run.id, context_id=context_id, artifact=artifact, last_chunk=True
            )
            for artifact in artifacts_of(run)
        ]
        updates.append(
            a2a.TaskStatusUpdateEvent(task_id=run.id, context_id=context_id, status=status_of(run))
        )
        return updates
    return []


def _status_update(run_id: str, context_id: str, state: int) -> a2a.TaskStatusUpdateEvent:
    return a2a.TaskStatusUpdateEvent(
        task_id=run_id, context_id=context_id, status=a2a.TaskStatus(state=state)
    )


def _status_note(run: common_pb2.AgentRun) -> str:
    if run.status == S.RUN_STATUS_FAILED:
        return run.error_message or "the run failed"
    if run.status == S.RUN_STATUS_WAITING:
        return 'a tool call waits for approval: send a data part {"decision": "approve"}'
    if run.status == S.RUN_STATUS_PAUSED:
        return "the run is paused: send a message on this task to continue it"
    return ""
