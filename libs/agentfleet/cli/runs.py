"""``agentfleet runs``, ``show`` and ``tree``: what runs did, from the history service."""

from __future__ import annotations

import argparse
import json

from rich.table import Table
from rich.tree import Tree

from agentfleet.cli.client import Connection
from agentfleet.cli.render import (
    console,
    enum_name,
    parse_run_status,
    print_json,
    run_status,
    seconds,
    styled_status,
    timestamp,
    to_dict,
)
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
    )
    reply = await conn.history().ListRuns(request)
    if args.json:
        print_json(reply)
        return 0
    table = Table("run", "agent", "status", "steps", "tokens", "created", "duration", "input")
    for run in reply.runs:
        table.add_row(
            run.id,
            run.agent_name,
            styled_status(run_status(run.status)),
            str(run.total_steps),
            str(run.tokens_in + run.tokens_out),
            timestamp(run.create_time),
            seconds(run.duration),
            run.input_preview[:40],
        )
    console.print(table)
    if reply.next_page_token:
        console.print(f"more: --page-token {reply.next_page_token}")
    return 0


async def show_run(conn: Connection, args: argparse.Namespace) -> int:
    history = conn.history()
    if args.message:
        reply = await history.GetRunMessage(
            history_pb2.GetRunMessageRequest(
                project_id=conn.project, run_id=args.run_id, message_id=args.message
            )
        )
        print_json(reply.message) if args.json else _print_full(to_dict(reply.message))
        return 0
    if args.tool_call:
        reply = await history.GetRunToolCall(
            history_pb2.GetRunToolCallRequest(
                project_id=conn.project, run_id=args.run_id, tool_call_id=args.tool_call
            )
        )
        print_json(reply.tool_call) if args.json else _print_full(to_dict(reply.tool_call))
        return 0
    if args.messages:
        return await _messages(conn, args)
    if args.tool_calls:
        return await _tool_calls(conn, args)
    reply = await history.GetRun(
        history_pb2.GetRunRequest(project_id=conn.project, run_id=args.run_id)
    )
    if args.json:
        print_json(reply)
        return 0
    run = reply.run
    table = Table.grid(padding=(0, 2))
    rows = [
        ("run", run.id),
        ("agent", run.agent_name),
        ("status", styled_status(run_status(run.status))),
        ("parent", run.parent_run_id or "-"),
        ("steps", f"{run.step_count} (total {run.total_steps}, resumes {run.resume_count})"),
        ("tokens", f"{run.tokens_in} in, {run.tokens_out} out, {run.tokens_total_tree} tree"),
        ("created", timestamp(run.create_time)),
        ("duration", seconds(run.duration) or "-"),
        ("messages", str(reply.message_count)),
        ("tool calls", str(reply.tool_call_count)),
        ("children", ", ".join(c.id for c in reply.children) or "-"),
        ("input", run.input),
    ]
    if run.error_message:
        rows.append(("error", f"[red]{run.error_message}[/red]"))
    for key, value in rows:
        table.add_row(f"[bold]{key}[/bold]", value)
    console.print(table)
    if run.summary:
        console.print("[bold]summary[/bold]")
        console.print(run.summary, markup=False)
    return 0


async def _messages(conn: Connection, args: argparse.Namespace) -> int:
    reply = await conn.history().ListRunMessages(
        history_pb2.ListRunMessagesRequest(
            project_id=conn.project,
            run_id=args.run_id,
            page_size=args.limit,
            page_token=args.page_token or "",
        )
    )
    if args.json:
        print_json(reply)
        return 0
    table = Table("message", "seq", "step", "role", "agent", "tokens", "preview")
    for m in reply.messages:
        role = enum_name(common_pb2.MessageRole, m.role, "MESSAGE_ROLE_")
        preview = m.preview.replace("\n", " ")[:60] + ("…" if m.truncated else "")
        calls = f" [{', '.join(m.function_names)}]" if m.function_names else ""
        table.add_row(
            m.id, str(m.seq), str(m.step), role, m.agent_name, str(m.tokens), preview + calls
        )
    console.print(table)
    if reply.next_page_token:
        console.print(f"more: --page-token {reply.next_page_token}")
    return 0


async def _tool_calls(conn: Connection, args: argparse.Namespace) -> int:
    reply = await conn.history().ListRunToolCalls(
        history_pb2.ListRunToolCallsRequest(
            project_id=conn.project,
            run_id=args.run_id,
            page_size=args.limit,
            page_token=args.page_token or "",
        )
    )
    if args.json:
        print_json(reply)
        return 0
    table = Table("tool call", "step", "tool", "status", "duration", "error")
    for c in reply.tool_calls:
        status = enum_name(common_pb2.ToolCallStatus, c.status, "TOOL_CALL_STATUS_")
        table.add_row(
            c.tool_call_id, str(c.step), c.tool_name, status, seconds(c.duration), c.error_preview
        )
    console.print(table)
    if reply.next_page_token:
        console.print(f"more: --page-token {reply.next_page_token}")
    return 0


def _print_full(data: dict[str, object]) -> None:
    console.print_json(json.dumps(data))


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


def _label(node: history_pb2.RunTreeNode) -> str:
    return (
        f"[bold]{node.agent_name}[/bold] [dim]{node.run_id}[/dim] "
        f"{styled_status(run_status(node.status))} step {node.step_count} "
        f"{node.tokens_in + node.tokens_out} tokens {seconds(node.duration)}"
    )
