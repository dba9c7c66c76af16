"""What one execution of a remote child has heard from its remote A2A task so far, and how
one streamed response of the task changes it (no I/O here: :mod:`remote_runs` records)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from a2a.client.client import Client
from a2a.types import a2a_pb2 as a2a

from agentfleet.structs import struct_dict
from services.executor.runs import RunStatus

MAX_ANSWER_CHARS = 100_000
"""Answer text a remote task may leave as its child's summary."""
_S = a2a.TaskState
ENDS: dict[int, RunStatus] = {
    _S.TASK_STATE_COMPLETED: "completed",
    _S.TASK_STATE_FAILED: "failed",
    _S.TASK_STATE_REJECTED: "failed",
    _S.TASK_STATE_CANCELED: "cancelled",
    # The child pauses; its parent (spawn_agents' resume_run_id) or a user (ResumeRun)
    # answers, and the answer is the next message on the same remote task.
    _S.TASK_STATE_INPUT_REQUIRED: "paused",
    # Credentials are the registration's headers: nobody in the run can supply them.
    _S.TASK_STATE_AUTH_REQUIRED: "failed",
}
"""How a remote task state stops the child's execution."""


def state_name(state: int) -> str:
    """``TASK_STATE_INPUT_REQUIRED`` -> ``input_required`` (a peer's unknown number: its digits)."""
    try:
        return a2a.TaskState.Name(state).removeprefix("TASK_STATE_").lower()  # type: ignore[arg-type]
    except ValueError:
        return str(state)


@dataclass(frozen=True, kw_only=True, slots=True)
class Heard:
    """What one response said."""

    texts: list[str]
    state: int | None = None
    """The task's state it names (a direct Message: completed), None: no state."""
    new_state: str = ""
    """The task's state by name when it differs from the one heard before ("" otherwise,
    and for a direct Message, which has no task)."""
    new_ids: bool = False
    """The response named a task id not known before (task_id, context_id updated)."""


@dataclass(kw_only=True, slots=True)
class RemoteTask:
    """What the remote side said so far, for one execution."""

    client: Client | None = None
    task_id: str = ""
    context_id: str = ""
    progress: int = 0
    """MODEL_TEXT events recorded."""
    statuses: int = 0
    """REMOTE_STATUS events recorded."""
    last_text: str = ""
    answer: list[str] = field(default_factory=list)
    output: dict[str, Any] | None = None
    end: RunStatus | None = None
    end_reason: str = ""
    answer_chars: int = 0
    state: int = _S.TASK_STATE_UNSPECIFIED

    def add_answer(self, texts: Sequence[str]) -> None:
        """Keeps answer text up to :data:`MAX_ANSWER_CHARS` in all (a peer sets how much
        it sends)."""
        for text in texts:
            room = MAX_ANSWER_CHARS - self.answer_chars
            if room <= 0:
                return
            self.answer.append(text[:room])
            self.answer_chars += min(len(text), room)

    def take(self, response: a2a.StreamResponse) -> Heard:
        """Folds one response of the task's stream (or its tasks/get) into what is known."""
        texts: list[str] = []
        state: int | None = None
        new_ids = False
        match response.WhichOneof("payload"):
            case "message":
                texts = texts_of(response.message.parts)
                self._keep(texts, response.message.parts)
                # A direct answer is the end of it; it names no task, so no state change.
                return Heard(texts=texts, state=_S.TASK_STATE_COMPLETED)
            case "task":
                new_ids = self._know(response.task.id, response.task.context_id)
                for artifact in response.task.artifacts:
                    self._keep(texts_of(artifact.parts), artifact.parts)
                texts = texts_of(response.task.status.message.parts)
                state = response.task.status.state
            case "status_update":
                update = response.status_update
                new_ids = self._know(update.task_id, update.context_id)
                texts = texts_of(update.status.message.parts)
                state = update.status.state
            case "artifact_update":
                update = response.artifact_update
                new_ids = self._know(update.task_id, update.context_id)
                texts = texts_of(update.artifact.parts)
                self._keep(texts, update.artifact.parts)
        new_state = ""
        if state is not None and state != self.state:
            self.state = state
            new_state = state_name(state)
        return Heard(texts=texts, state=state, new_state=new_state, new_ids=new_ids)

    def _keep(self, texts: list[str], parts: Sequence[a2a.Part]) -> None:
        self.add_answer(texts)
        self.output = self.output or data_of(parts)

    def _know(self, task_id: str, context_id: str) -> bool:
        if task_id and task_id != self.task_id:
            self.task_id, self.context_id = task_id, context_id
            return True
        return False


def texts_of(parts: Sequence[a2a.Part]) -> list[str]:
    return [p.text for p in parts if p.text]


def data_of(parts: Sequence[a2a.Part]) -> dict[str, Any] | None:
    for part in parts:
        if part.HasField("data") and part.data.HasField("struct_value"):
            return struct_dict(part.data.struct_value)
    return None
