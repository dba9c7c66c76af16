"""``agentfleet dag submit FILE.yaml`` and ``agentfleet dag watch GRAPH``.

A DAG file::

    title: Research sprint
    max_parallel: 2              # optional
    tasks:
      - key: survey
        title: Survey the field
        description: ...
        assigned_agent: research-assistant   # optional; else the dispatcher selects
        tags: [research]                     # optional
        max_retries: 2                       # optional
        timeout_s: 600                       # optional
      - key: report
        title: Write the report
        blocked_by: [survey]                 # edges: these tasks must complete first
"""

from __future__ import annotations

import argparse
from typing import Any

from google.protobuf import json_format
from google.protobuf.duration_pb2 import Duration
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from agentfleet.cli.agents import read_document
from agentfleet.cli.client import CliError, Connection
from agentfleet.cli.render import console, enum_name, print_json
from agentfleet.v1 import dispatcher_pb2

_TASK_KEYS = {"key", "title", "description", "assigned_agent", "tags", "priority", "max_retries"}
_DONE_GRAPH = {"completed", "failed", "cancelled", "paused"}


def graph_request(data: dict[str, Any], project_id: str) -> dispatcher_pb2.CreateTaskGraphRequest:
    """The CreateTaskGraph request a DAG file describes; errors name the field."""
    tasks = data.get("tasks")
    if not isinstance(tasks, list) or not tasks:
        raise CliError("INVALID_ARGUMENT", "tasks: a DAG file needs a non-empty list of tasks")
    request = dispatcher_pb2.CreateTaskGraphRequest(
        project_id=project_id,
        title=str(data.get("title", "")),
        max_parallel=int(data.get("max_parallel", 0)),
    )
    for index, task in enumerate(tasks):
        where = f"tasks[{index}]"
        if not isinstance(task, dict):
            raise CliError("INVALID_ARGUMENT", f"{where}: must be a mapping")
        unknown = set(task) - _TASK_KEYS - {"blocked_by", "timeout_s", "properties"}
        if unknown:
            raise CliError("INVALID_ARGUMENT", f"{where}.{sorted(unknown)[0]}: unknown field")
        spec = dispatcher_pb2.TaskSpec()
        try:
            json_format.ParseDict({k: v for k, v in task.items() if k in _TASK_KEYS}, spec)
            if "properties" in task:
                spec.properties.update(task["properties"])
        except (json_format.ParseError, ValueError, TypeError) as exc:
            raise CliError("INVALID_ARGUMENT", f"{where}: {exc}") from None
        if "timeout_s" in task:
            spec.timeout.CopyFrom(Duration(seconds=int(task["timeout_s"])))
        request.tasks.append(spec)
        for blocker in task.get("blocked_by") or []:
            request.edges.append(dispatcher_pb2.TaskEdge(blocker_key=blocker, blocked_key=spec.key))
    return request


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
            if graph_status in _DONE_GRAPH:
                break
    if not json_mode:
        table = Table("task", "status", title=f"graph {graph_id}: {graph_status}")
        for key, status in statuses.items():
            table.add_row(key, status)
        console.print(table)
    return 0 if graph_status == "completed" else 1
