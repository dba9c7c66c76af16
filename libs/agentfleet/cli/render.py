"""Small shared pieces of terminal output: status names and colours, JSON lines, durations."""

from __future__ import annotations

import json
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message
from rich.console import Console

from agentfleet.v1 import common_pb2

console = Console(highlight=False)

STATUS_STYLE = {
    "queued": "dim",
    "running": "cyan",
    "completed": "green",
    "failed": "red",
    "cancelled": "yellow",
    "paused": "magenta",
}


def enum_name(enum: Any, value: int, prefix: str) -> str:
    """``RUN_STATUS_COMPLETED`` -> ``completed``."""
    return enum.Name(value).removeprefix(prefix).lower()


def run_status(value: int) -> str:
    return enum_name(common_pb2.RunStatus, value, "RUN_STATUS_")


def styled_status(status: str) -> str:
    style = STATUS_STYLE.get(status, "")
    return f"[{style}]{status}[/{style}]" if style else status


def parse_run_status(name: str) -> int:
    """``completed`` -> ``RUN_STATUS_COMPLETED`` (argparse choices keep names valid)."""
    return common_pb2.RunStatus.Value(f"RUN_STATUS_{name.upper()}")


RUN_STATUS_CHOICES = [run_status(v) for v in common_pb2.RunStatus.values() if v != 0]


def to_dict(message: Message) -> dict[str, Any]:
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def print_json(message: Message | dict[str, Any]) -> None:
    """One JSON object on one line (``--json`` output is JSON lines)."""
    data = message if isinstance(message, dict) else to_dict(message)
    print(json.dumps(data, sort_keys=True), flush=True)


def seconds(duration: Any) -> str:
    """A protobuf Duration as ``1.25s``; empty when unset."""
    if duration is None or (duration.seconds == 0 and duration.nanos == 0):
        return ""
    return f"{duration.seconds + duration.nanos / 1e9:.2f}s"


def timestamp(value: Any) -> str:
    if value is None or (value.seconds == 0 and value.nanos == 0):
        return ""
    return value.ToDatetime().strftime("%Y-%m-%d %H:%M:%S")
