"""Points in time on the wire: the one conversion of a datetime into a protobuf Timestamp.

An unset time is None on both sides (an unset message field), never the epoch. A string
is read as ISO 8601 (times kept in JSON documents, such as a task's properties).
"""

from __future__ import annotations

from datetime import datetime

from google.protobuf import timestamp_pb2


def timestamp_proto(value: datetime | str | None) -> timestamp_pb2.Timestamp | None:
    """The Timestamp of ``value``; None for None or an empty string (the field stays unset)."""
    if value is None or value == "":
        return None
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(datetime.fromisoformat(value) if isinstance(value, str) else value)
    return stamp
