"""Small shared pieces of terminal output: the console, status names and colours, JSON
lines, durations.

Terminal output cannot be forged. Much of what the CLI prints came from a tenant, a model or
an MCP server (run input, answers, error text, tool and agent names), and a terminal obeys
the control characters in what it is sent: ``ESC]0;...BEL`` retitles the window,
``ESC[2J`` clears it, ``ESC]52;c;...`` writes the clipboard, cursor moves draw a forged
"All checks passed" over the real output, C1 ``\x9b`` is CSI on some terminals. So every
command prints through :data:`console` (or :func:`inert` for a plain ``print``), where:

- every character of content passes through :func:`inert`, below the renderables (tables,
  trees, live views, JSON) so no command can forget it; only Rich's own styling and cursor
  control (the live view) reach the terminal as escapes;
- markup and emoji codes are never read from strings: ``[link=http://x]`` in a model's text
  prints as written. The CLI's own styles are :class:`rich.text.Text` styles.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from google.protobuf.message import Message
from rich.console import Console, ConsoleOptions, RenderableType
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from agentfleet.structs import message_dict
from agentfleet.v1 import common_pb2

_BIDI_CONTROLS = (*range(0x202A, 0x202F), *range(0x2066, 0x206A))
"""Embeddings, overrides and isolates: they reorder what follows ("trojan source")."""
_INERT = {
    # Control Pictures (U+2400-U+2421): one character for one, so text keeps its length
    # and the operator sees that a control was there, and which (ESC is U+241B, "␛").
    **{code: 0x2400 + code for code in range(0x20) if code not in (0x09, 0x0A)},
    0x7F: 0x2421,
    # C1 and the bidi controls have no picture: the replacement character.
    **dict.fromkeys(range(0x80, 0xA0), 0xFFFD),
    **dict.fromkeys(_BIDI_CONTROLS, 0xFFFD),
}


def inert(text: str) -> str:
    """``text`` with every control character but newline and tab (C0, DEL, C1, bidi
    controls) replaced by a visible one: safe to send to a terminal."""
    return text.translate(_INERT)


class InertConsole(Console):
    """A console whose content reaches the terminal only through :func:`inert`, and which
    reads no markup or emoji codes from strings (see the module docstring)."""

    def __init__(self, **options: Any) -> None:
        super().__init__(markup=False, emoji=False, highlight=False, **options)

    def render(
        self, renderable: RenderableType, options: ConsoleOptions | None = None
    ) -> Iterator[Segment]:
        # Every print, live refresh, table cell and tree label is rendered here, nested
        # renderables included; control segments are Rich's own cursor moves.
        for segment in super().render(renderable, options):
            if segment.control:
                yield segment
            else:
                yield Segment(inert(segment.text), segment.style)


console = InertConsole()
"""Standard output: the one console every command prints with."""
notes = InertConsole(stderr=True)
"""Standard error: notes that must stay out of captured output."""

T = TypeVar("T")

STATUS_STYLE = {
    "queued": "dim",
    "running": "cyan",
    "completed": "green",
    "failed": "red",
    "cancelled": "yellow",
    "paused": "magenta",
}


def terminal_text(value: str, style: str = "") -> Text:
    """Server or tenant text to print as written: a ``Text``, so never read as markup, with
    its control characters made visible (:func:`inert`)."""
    return Text(inert(value), style=style)


TRIGGERED = ("trigger", "schedule", "event")
"""AgentRun.started_by values of a run that a trigger, a schedule tick or an event started."""


def started_by_text(started_by: str, origin: Mapping[str, Any]) -> str:
    """What started a triggered run, for a tree node (empty for any other run): its trigger
    and what fired it, e.g. ``started by trigger on_document_ingested (Document 4f1c…)``.
    The origin holds tenant text (event names, request ids): print it with
    :func:`terminal_text`."""
    if started_by not in TRIGGERED:
        return ""
    what = str(origin.get("trigger") or started_by)
    detail = ""
    if origin.get("object_type"):
        detail = f"{origin['object_type']} {str(origin.get('object_id', ''))[:8]}…"
    elif origin.get("request_id"):
        detail = f"request {origin['request_id']}"
    elif origin.get("tick_at"):
        detail = f"tick {origin['tick_at']}"
    return f"started by {started_by} {what}" + (f" ({detail})" if detail else "")


def enum_name(enum: Any, value: int, prefix: str) -> str:
    """``RUN_STATUS_COMPLETED`` -> ``completed``."""
    return enum.Name(value).removeprefix(prefix).lower()


def run_status(value: int) -> str:
    return enum_name(common_pb2.RunStatus, value, "RUN_STATUS_")


def styled_status(status: str) -> Text:
    return Text(status, style=STATUS_STYLE.get(status, ""))


def parse_run_status(name: str) -> int:
    """``completed`` -> ``RUN_STATUS_COMPLETED`` (argparse choices keep names valid)."""
    return common_pb2.RunStatus.Value(f"RUN_STATUS_{name.upper()}")


RUN_STATUS_CHOICES = [run_status(v) for v in common_pb2.RunStatus.values() if v != 0]


def to_dict(message: Message) -> dict[str, Any]:
    return message_dict(message, preserving_proto_field_name=True)


def print_json(message: Message | dict[str, Any]) -> None:
    """One JSON object on one line (``--json`` output is JSON lines); ASCII only, so every
    control character is a ``\\u`` escape."""
    data = message if isinstance(message, dict) else to_dict(message)
    print(json.dumps(data, sort_keys=True), flush=True)


def print_listing(
    reply: Message,
    items: Iterable[T],
    columns: Sequence[str],
    row: Callable[[T], Sequence[str | Text]],
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
        console.print(f"more: --page-token {next_page_token}", soft_wrap=True)
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
