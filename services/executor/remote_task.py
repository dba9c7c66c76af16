"""What one execution of a remote child has heard from its remote A2A task so far."""

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


@dataclass(kw_only=True, slots=True)
class RemoteTask:
    """What the remote side said so far, for one execution."""

    client: Client | None = None
    task_id: str = ""
    context_id: str = ""
    progress: int = 0
    last_text: str = ""
    answer: list[str] = field(default_factory=list)
    output: dict[str, Any] | None = None
    end: RunStatus | None = None
    end_reason: str = ""
    answer_chars: int = 0

    def add_answer(self, texts: Sequence[str]) -> None:
        """Keeps answer text up to :data:`MAX_ANSWER_CHARS` in all (a peer sets how much
        it sends)."""
        for text in texts:
            room = MAX_ANSWER_CHARS - self.answer_chars
            if room <= 0:
                return
            self.answer.append(text[:room])
            self.answer_chars += min(len(text), room)


def texts_of(parts: Sequence[a2a.Part]) -> list[str]:
    return [p.text for p in parts if p.text]


def data_of(parts: Sequence[a2a.Part]) -> dict[str, Any] | None:
    for part in parts:
        if part.HasField("data") and part.data.HasField("struct_value"):
            return struct_dict(part.data.struct_value)
    return None
