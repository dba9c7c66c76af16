"""MODEL_TEXT_DELTA: the transient pieces of a streamed model reply (issue #19).

Deltas are not stored: the step's MODEL_TEXT (stored, replayed) carries the whole text, and
a delta only lets a live subscriber show the words as they come. The executor sends each
piece with ``NOTIFY agentfleet_run_deltas`` outside any transaction, so it reaches every
StartRun and WatchRun follower of the run, on any replica, before the commit that stores
the step's reply (PostgreSQL delivers notifications in commit order). A delta carries no
seq of its own (0 on the wire) but ``before_seq``, the seq of the run's next stored event:
a follower forwards it only while it has not yet sent that event, so a stream never shows
a piece after the text it belongs to, and replay == live holds for every stored event.

A lost notification loses a piece of the live view only; never a stored event.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime

import asyncpg

from agentfleet.postgres.db import Notification, notify
from agentfleet.v1 import common_pb2

DELTA_CHANNEL = "agentfleet_run_deltas"
"""NOTIFY channel of deltas; payload: :func:`encode_delta`."""

MAX_PIECE_CHARS = 1000
"""Longest text of one notification: JSON may spell a character in up to 6 bytes, and a
NOTIFY payload must stay under 8000 bytes."""

BUFFERED_DELTAS = 4096
"""Deltas a follower keeps before it sends them; the oldest go first (they are a live
view only)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TextDelta:
    """One piece of a run's streamed model reply."""

    run_id: str
    root_run_id: str
    agent_name: str
    step: int
    text: str
    thought: bool = False
    offset: int
    """Characters of the step's text (or thought) before this piece."""
    before_seq: int
    """seq of the run's next stored event (the step's MODEL_TEXT or what follows it)."""


def split_delta(delta: TextDelta, limit: int = MAX_PIECE_CHARS) -> list[TextDelta]:
    """``delta`` in pieces of at most ``limit`` characters, offsets adjusted."""
    if len(delta.text) <= limit:
        return [delta]
    return [
        TextDelta(
            run_id=delta.run_id,
            root_run_id=delta.root_run_id,
            agent_name=delta.agent_name,
            step=delta.step,
            text=delta.text[start : start + limit],
            thought=delta.thought,
            offset=delta.offset + start,
            before_seq=delta.before_seq,
        )
        for start in range(0, len(delta.text), limit)
    ]


def encode_delta(delta: TextDelta) -> str:
    """The NOTIFY payload of one piece (at most :data:`MAX_PIECE_CHARS` of text)."""
    return json.dumps(
        {
            "r": delta.run_id,
            "o": delta.root_run_id,
            "a": delta.agent_name,
            "s": delta.step,
            "t": delta.text,
            "h": delta.thought,
            "f": delta.offset,
            "b": delta.before_seq,
        },
        separators=(",", ":"),
    )


def decode_delta(payload: str) -> TextDelta | None:
    """The piece a payload carries; None for anything malformed."""
    try:
        data = json.loads(payload)
        return TextDelta(
            run_id=str(data["r"]),
            root_run_id=str(data["o"]),
            agent_name=str(data["a"]),
            step=int(data["s"]),
            text=str(data["t"]),
            thought=bool(data["h"]),
            offset=int(data["f"]),
            before_seq=int(data["b"]),
        )
    except (ValueError, KeyError, TypeError):
        return None


async def publish_delta(pool: asyncpg.Pool, delta: TextDelta) -> None:
    """Sends ``delta`` (split as needed) to every follower; outside any transaction, so it
    is delivered at once, before the step's reply is stored."""
    for piece in split_delta(delta):
        await notify(pool, DELTA_CHANNEL, encode_delta(piece))


def delta_to_proto(
    delta: TextDelta, *, parent_run_id: str | None, trace_id: str | None
) -> common_pb2.RunEvent:
    """The wire form: a RunEvent with seq 0 and a ``model_text_delta`` payload."""
    message = common_pb2.RunEvent(
        run_id=delta.run_id,
        root_run_id=delta.root_run_id,
        parent_run_id=parent_run_id or "",
        seq=0,
        agent_name=delta.agent_name,
        type=common_pb2.RUN_EVENT_TYPE_MODEL_TEXT_DELTA,
        trace_id=trace_id or "",
        model_text_delta=common_pb2.ModelTextDelta(
            text=delta.text,
            step=delta.step,
            thought=delta.thought,
            offset=delta.offset,
            before_seq=delta.before_seq,
        ),
    )
    message.create_time.FromDatetime(datetime.now(UTC))
    return message


class DeltaFollower:
    """The deltas of one run for one stream, between two of its stored events.

    Subscribe :meth:`on_notification` to :data:`DELTA_CHANNEL`; ``wake`` is set when a
    piece arrives. The stream calls :meth:`take` before it sends stored events and gets the
    pieces whose stored event it has not sent yet (``before_seq`` after its last seq).
    """

    def __init__(self, run_id: str, *, wake: asyncio.Event | None = None) -> None:
        self.run_id = run_id
        self._wake = wake
        self._pending: deque[TextDelta] = deque(maxlen=BUFFERED_DELTAS)

    def on_notification(self, notification: Notification) -> None:
        """A listener sink for :data:`DELTA_CHANNEL`."""
        delta = decode_delta(notification.payload)
        if delta is not None:
            self.offer(delta)

    def offer(self, delta: TextDelta) -> None:
        """Keeps ``delta`` if it is of this follower's run, and wakes the stream."""
        if delta.run_id != self.run_id:
            return
        self._pending.append(delta)
        if self._wake is not None:
            self._wake.set()

    def take(self, last_seq: int, upto: int | None = None) -> list[TextDelta]:
        """The pending pieces to send now, after stored event ``last_seq`` (the last one
        the stream sent) and, with ``upto``, before stored event ``upto``: those whose
        ``before_seq`` is in ``(last_seq, upto]``. Older pieces are dropped; later ones
        stay pending."""
        out: list[TextDelta] = []
        keep: deque[TextDelta] = deque(maxlen=BUFFERED_DELTAS)
        for delta in self._pending:
            if delta.before_seq <= last_seq:
                continue
            if upto is None or delta.before_seq <= upto:
                out.append(delta)
            else:
                keep.append(delta)
        self._pending = keep
        return out
