"""What a run's event stream holds besides its transient pieces."""

from __future__ import annotations

from collections.abc import Sequence

from agentfleet.v1 import common_pb2

DELTA = common_pb2.RUN_EVENT_TYPE_MODEL_TEXT_DELTA


def stored_events_of(stream: Sequence[common_pb2.RunEvent]) -> list[common_pb2.RunEvent]:
    """The stream without its MODEL_TEXT_DELTA events: those carry seq 0 and are never
    stored, so a replay has none (checked here), and the rest equals the replay."""
    deltas = [e for e in stream if e.type == DELTA]
    assert all(e.seq == 0 for e in deltas), "a delta carries a seq of its own"
    return [e for e in stream if e.type != DELTA]
