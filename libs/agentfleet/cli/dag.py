"""``agentfleet dag submit FILE.yaml`` and ``agentfleet dag watch GRAPH``.

The file format is :mod:`agentfleet.dagfile`'s, shared with the tests and benchmarks.
"""

from __future__ import annotations

import argparse
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from agentfleet import dagfile
from agentfleet.cli.client import CliError, Connection
from agentfleet.cli.manage.agents import read_document
from agentfleet.cli.render import console, enum_name, print_json
from agentfleet.errors import InvalidArgument
from agentfleet.v1 import dispatcher_pb2


def graph_request(data: dict[str, Any], project_id: str) -> dispatcher_pb2.CreateTaskGraphRequest:
    """The CreateTaskGraph request a DAG file describes, or a CliError naming the field."""
    try:
        return dagfile.graph_request(data, project_id=project_id)
    except InvalidArgument as exc:
        raise CliError("INVALID_ARGUMENT", exc.message) from None


async def dag(conn: Connection, args: argparse.Namespace) -> int:
    if args.dag_command == "submit":
        request = graph_request(read_document(args.file, "DAG file"), conn.project)
        request.validate_only = args.validate_only
        reply = await conn.dispatcher().CreateTaskGraph(request)
        graph = reply.task_graph
        if args.json:
            print_json(reply)
        else:
            verb = "valid" if args.validate_only else "submitted"
            console.print(f"{verb} task graph {graph.id} ({len(graph.tasks)} tasks)")
        if args.watch and not args.validate_only:
            return await watch(conn, graph.id, json_mode=args.json)
        return 0
    return await watch(conn, args.graph_id, json_mode=args.json)


async def watch(conn: Connection, graph_id: str, *, json_mode: bool) -> int:
    """Follows a graph to its end with a progress bar over its tasks."""
    stream = conn.dispatcher().WatchTaskGraph(
        dispatcher_pb2.WatchTaskGraphRequest(project_id=conn.project, task_graph_id=graph_id)
    )
    statuses: dict[str, str] = {}
    graph_status = "active"
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, TimeElapsedColumn(), console=console, disable=json_mode) as bar:
        progress = bar.add_task("tasks", total=None)
        async for event in stream:
            if json_mode:
                print_json(event)
            if event.HasField("task"):
                name = event.task.spec.key or event.task.id
                statuses[name] = enum_name(
                    dispatcher_pb2.TaskStatus, event.task.status, "TASK_STATUS_"
                )
            if event.graph_status:
                graph_status = enum_name(
                    dispatcher_pb2.TaskGraphStatus, event.graph_status, "TASK_GRAPH_STATUS_"
                )
            counts = event.counts
            if counts.total:
                finished = counts.completed + counts.failed + counts.cancelled
                bar.update(progress, total=counts.total, completed=finished)
            # No break on a final graph status: a finished graph's snapshot carries it on
            # every task's event, so stopping at the first one left the rest out of the
            # table. The stream itself ends once the graph is final (after the snapshot).
    if not json_mode:
        table = Table("task", "status", title=f"graph {graph_id}: {graph_status}")
        for key, status in statuses.items():
            table.add_row(key, status)
        console.print(table)
    return 0 if graph_status == "completed" else 1
