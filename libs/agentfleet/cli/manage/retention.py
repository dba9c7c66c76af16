"""``agentfleet history prune|retention``: what retention removes from a project's history,
and how long it keeps it (PruneHistory, SetHistoryRetention)."""

from __future__ import annotations

import argparse

from agentfleet.cli.client import Connection
from agentfleet.cli.render import console, print_json
from agentfleet.v1 import history_pb2


def add_history_commands(history: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    prune = history.add_parser(
        "prune", help="delete finished runs older than the retention (admin; --dry-run: count)"
    )
    prune.add_argument("--dry-run", action="store_true", help="count, delete nothing")
    prune.add_argument(
        "--max-runs", type=int, default=0, help="top-level runs at most (default 10,000)"
    )
    retention = history.add_parser("retention", help="show or set the retention (set: admin)")
    days = retention.add_mutually_exclusive_group()
    days.add_argument("--days", type=int, help="keep finished runs this many days (0: forever)")
    days.add_argument("--default", action="store_true", help="use the deployment's retention again")


async def history(conn: Connection, args: argparse.Namespace) -> int:
    api = conn.history()
    if args.history_command == "prune":
        reply = await api.PruneHistory(
            history_pb2.PruneHistoryRequest(
                project_id=conn.project, dry_run=args.dry_run, max_runs=args.max_runs
            )
        )
        if args.json:
            print_json(reply)
        elif reply.keep_days == 0:
            console.print("retention: forever; nothing to prune")
        else:
            verb = "would delete" if args.dry_run else "deleted"
            cutoff = reply.cutoff.ToDatetime().isoformat(timespec="seconds")
            console.print(f"retention {reply.keep_days} days: runs finished before {cutoff} UTC")
            console.print(
                f"{verb} {reply.runs} runs, {reply.messages} messages, "
                f"{reply.tool_calls} tool calls, {reply.events} events, "
                f"{reply.trigger_firings} trigger firings"
            )
            if reply.more:
                console.print("more remain: run it again")
        return 0
    request = history_pb2.SetHistoryRetentionRequest(project_id=conn.project)
    if args.days is not None:
        request.keep_days = args.days
    if args.days is not None or args.default:
        reply = await api.SetHistoryRetention(request)
        keep_days, own = reply.keep_days, reply.project_setting
    else:
        # Showing it: a dry prune of nothing answers with the retention in effect.
        dry = await api.PruneHistory(
            history_pb2.PruneHistoryRequest(project_id=conn.project, dry_run=True, max_runs=1)
        )
        keep_days, own = dry.keep_days, None
    if args.json:
        print_json(
            history_pb2.SetHistoryRetentionResponse(keep_days=keep_days, project_setting=bool(own))
        )
        return 0
    shown = "forever" if keep_days == 0 else f"{keep_days} days"
    where = {True: " (the project's own)", False: " (the deployment's)", None: ""}[own]
    console.print(f"retention: {shown}{where}")
    return 0
