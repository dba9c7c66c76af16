"""``agentfleet runs``, ``show`` and ``tree``: what runs did, from the history service."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from typing import Any

from google.protobuf.message import Message
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from agentfleet.cli.client import Connection
from agentfleet.cli.render import (
    console,
    enum_name,
    parse_run_status,
    print_json,
    print_listing,
    run_status,
    seconds,
    started_by_text,
    styled_status,
    terminal_text,
    timestamp,
    to_dict,
)
from agentfleet.settings.model_prices import usd
from agentfleet.structs import struct_dict
from agentfleet.v1 import common_pb2, history_pb2


async def list_runs(conn: Connection, args: argparse.Namespace) -> int:
    request = history_pb2.ListRunsRequest(
        project_id=conn.project,
        page_size=args.limit,
        page_token=args.page_token or "",
        agent_name=args.agent or "",
        statuses=[parse_run_status(s) for s in args.status],
        parent_run_id=args.parent or "",
        root_run_id=args.root or "",
        top_level_only=args.top_level,
        started_by=args.started_by or "",
    )
    reply = await conn.history().ListRuns(request)
    return print_listing(
        reply,
        reply.runs,
        ("run", "agent", "status", "steps", "tokens", "cost", "created", "duration", "input"),
        _run_row,
        json_mode=args.json,
        next_page_token=reply.next_page_token,
    )


def _run_row(run: history_pb2.RunSummary) -> tuple[str | Text, ...]:
    return (
        run.id,
        run.agent_name,
        styled_status(run_status(run.status)),
        str(run.total_steps),
        str(run.tokens_in + run.tokens_out),
        usd(run.cost_nanos),
        timestamp(run.create_time),
        seconds(run.duration),
        run.input_preview[:40],
    )


async def show_run(conn: Connection, args: argparse.Namespace) -> int:
    history = conn.history()
    if args.message:
        message = await history.GetRunMessage(
            history_pb2.GetRunMessageRequest(
                project_id=conn.project, run_id=args.run_id, message_id=args.message
            )
        )
        return _print_full(message.message, json_mode=args.json)
    if args.tool_call:
        call = await history.GetRunToolCall(
            history_pb2.GetRunToolCallRequest(
                project_id=conn.project, run_id=args.run_id, tool_call_id=args.tool_call
            )
        )
        return _print_full(call.tool_call, json_mode=args.json)
    if args.messages or args.tool_calls:
        return await _run_listing(conn, args)
    reply = await history.GetRun(
        history_pb2.GetRunRequest(project_id=conn.project, run_id=args.run_id)
    )
    if args.json:
        print_json(reply)
        return 0
    run = reply.run
    table = Table.grid(padding=(0, 2))
    rows: list[tuple[str, str | Text]] = [
        ("run", run.id),
        ("agent", run.agent_name),
        ("status", styled_status(run_status(run.status))),
        ("parent", run.parent_run_id or "-"),
        *(
            [("remote", f"A2A {run.remote.name} at {run.remote.url or run.remote.card_url}")]
            if run.HasField("remote")
            else []
        ),
        ("steps", f"{run.step_count} (total {run.total_steps}, resumes {run.resume_count})"),
        ("tokens", f"{run.tokens_in} in, {run.tokens_out} out, {run.tokens_total_tree} tree"),
        ("cost", f"{usd(run.cost_nanos)}, {usd(run.cost_total_tree_nanos)} tree"),
        ("created", timestamp(run.create_time)),
        ("duration", seconds(run.duration) or "-"),
        ("messages", str(reply.message_count)),
        ("tool calls", str(reply.tool_call_count)),
        ("children", ", ".join(c.id for c in reply.children) or "-"),
        ("input", terminal_text(run.input)),
    ]
    if run.HasField("waiting_for"):
        waiting = run.waiting_for
        since = timestamp(waiting.since)
        rows.append(("waiting", terminal_text(f"{waiting.message} (since {since})")))
    if run.error_message:
        rows.append(("error", Text(run.error_message, style="red")))
    for key, value in rows:
        table.add_row(Text(key, style="bold"), value)
    console.print(table)
    if run.summary:
        console.print(Text("summary", style="bold"))
        console.print(run.summary)
    return 0


async def _run_listing(conn: Connection, args: argparse.Namespace) -> int:
    """One page of the run's messages (``--messages``) or tool calls (``--tool-calls``)."""
    history = conn.history()
    page: dict[str, Any] = {
        "project_id": conn.project,
        "run_id": args.run_id,
        "page_size": args.limit,
        "page_token": args.page_token or "",
    }
    reply: history_pb2.ListRunMessagesResponse | history_pb2.ListRunToolCallsResponse
    row: Callable[[Any], tuple[str, ...]]
    if args.messages:
        reply = await history.ListRunMessages(
            history_pb2.ListRunMessagesRequest(**page, include_internal=args.internal)
        )
        items: Sequence[Any] = reply.messages
        columns = ("message", "seq", "step", "role", "agent", "tokens", "preview")
        row = _message_row
    else:
        reply = await history.ListRunToolCalls(
            history_pb2.ListRunToolCallsRequest(**page, include_internal=args.internal)
        )
        items = reply.tool_calls
        columns = ("tool call", "step", "tool", "status", "duration", "error")
        row = _tool_call_row
    return print_listing(
        reply, items, columns, row, json_mode=args.json, next_page_token=reply.next_page_token
    )


def _message_row(m: history_pb2.MessageSummary) -> tuple[str, ...]:
    role = enum_name(common_pb2.MessageRole, m.role, "MESSAGE_ROLE_")
    preview = m.preview.replace("\n", " ")[:60] + ("…" if m.truncated else "")
    calls = f" [{', '.join(m.function_names)}]" if m.function_names else ""
    return (m.id, str(m.seq), str(m.step), role, m.agent_name, str(m.tokens), preview + calls)


def _tool_call_row(c: history_pb2.ToolCallSummary) -> tuple[str, ...]:
    status = enum_name(common_pb2.ToolCallStatus, c.status, "TOOL_CALL_STATUS_")
    return (c.tool_call_id, str(c.step), c.tool_name, status, seconds(c.duration), c.error_preview)


def _print_full(message: Message, *, json_mode: bool) -> int:
    """One message or tool call: a JSON line with ``--json``, else pretty-printed JSON."""
    if json_mode:
        print_json(message)
    else:
        console.print_json(json.dumps(to_dict(message)))
    return 0


async def show_tree(conn: Connection, args: argparse.Namespace) -> int:
    reply = await conn.history().GetRunTree(
        history_pb2.GetRunTreeRequest(project_id=conn.project, run_id=args.run_id)
    )
    if args.json:
        print_json(reply)
        return 0
    by_parent: dict[str, list[history_pb2.RunTreeNode]] = {}
    for node in reply.nodes:
        by_parent.setdefault(node.parent_run_id, []).append(node)
    root = next(n for n in reply.nodes if n.run_id == reply.root_run_id)
    tree = Tree(_label(root))
    _grow(tree, root.run_id, by_parent)
    console.print(tree)
    console.print(f"tokens in the tree: {reply.tokens_total}")
    return 0


def _grow(branch: Tree, run_id: str, by_parent: dict[str, list[history_pb2.RunTreeNode]]) -> None:
    for node in by_parent.get(run_id, []):
        _grow(branch.add(_label(node)), node.run_id, by_parent)


def _label(node: history_pb2.RunTreeNode) -> Text:
    label = Text.assemble(
        (node.agent_name, "bold"),
        " ",
        (node.run_id, "dim"),
        " ",
        styled_status(run_status(node.status)),
        f" step {node.step_count} {node.tokens_in + node.tokens_out} tokens "
        f"{usd(node.cost_nanos)} {seconds(node.duration)}",
    )
    started = started_by_text(node.started_by, struct_dict(node.trigger_origin))
    if started:
        label.append(terminal_text(f" {started}", style="magenta"))
    if node.HasField("remote"):
        label.append(f" remote A2A {node.remote.url or node.remote.card_url}", "cyan")
    if node.HasField("waiting_for"):
        label.append(terminal_text(f" ({node.waiting_for.message})", style="yellow"))
    return label
