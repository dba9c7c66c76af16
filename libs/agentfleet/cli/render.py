"""Small shared pieces of terminal output: status names and colours, JSON lines, durations."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from google.protobuf import json_format
from google.protobuf.message import Message
from rich.console import Console
from rich.table import Table
from rich.text import Text

from agentfleet.v1 import common_pb2

console = Console(highlight=False)

T = TypeVar("T")

STATUS_STYLE = {
    "queued": "dim",
    "running": "cyan",
    "completed": "green",
    "failed": "red",
    "cancelled": "yellow",
    "paused": "magenta",
}


_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
"""Characters that act on a terminal instead of showing: C0/C1 controls but newline and
tab (escape sequences start with ESC or CSI), and bidirectional overrides."""


def terminal_text(value: str, style: str = "") -> Text:
    """Server or tenant text to print as written: a ``Text``, so never read as markup, and
    without the characters that would move the cursor, clear or recolour the terminal."""
    return Text(_CONTROL.sub("", value), style=style)


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


def print_listing(
    reply: Message,
    items: Iterable[T],
    columns: Sequence[str],
    row: Callable[[T], Sequence[str]],
    *,
    json_mode: bool,
    next_page_token: str = "",
) -> int:
    """A listing command's output and exit code: the reply as one JSON line with ``--json``,
    else a table of ``items`` (``row`` gives an item's cells) and, when a page follows, the
    flag that fetches it (listings without ``--page-token`` pass no token)."""
    if json_mode:
        print_json(reply)
        return 0
    table = Table(*columns)
    for item in items:
        table.add_row(*row(item))
    console.print(table)
    if next_page_token:
        console.print(f"more: --page-token {next_page_token}")
    return 0


def seconds(duration: Any) -> str:
    """A protobuf Duration as ``1.25s``; empty when unset."""
    if duration is None or (duration.seconds == 0 and duration.nanos == 0):
        return ""
    return f"{duration.seconds + duration.nanos / 1e9:.2f}s"


def timestamp(value: Any) -> str:
    if value is None or (value.seconds == 0 and value.nanos == 0):
        return ""
    return value.ToDatetime().strftime("%Y-%m-%d %H:%M:%S")
