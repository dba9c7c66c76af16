"""Points in time on the wire: the one conversion of a datetime into a protobuf Timestamp.

An unset time is None on both sides (an unset message field), never the epoch. A string
is read as ISO 8601 (times kept in JSON documents, such as a task's properties).
"""

from __future__ import annotations

from datetime import datetime

from google.protobuf import duration_pb2, timestamp_pb2


def timestamp_proto(value: datetime | str | None) -> timestamp_pb2.Timestamp | None:
    """The Timestamp of ``value``; None for None or an empty string (the field stays unset)."""
    if value is None or value == "":
        return None
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(datetime.fromisoformat(value) if isinstance(value, str) else value)
    return stamp


def duration_proto(seconds: float) -> duration_pb2.Duration:
    """A protobuf Duration of ``seconds``, fractions kept (``Duration(seconds=int(x))`` drops
    them: a 2.5 s timeout became 2 s)."""
    duration = duration_pb2.Duration()
    duration.FromNanoseconds(round(seconds * 1e9))
    return duration
