"""``agentfleet approvals``, ``approve`` and ``reject``: tool calls that wait for a person
(issue #19). The listing reads the history service (WAITING runs, their calls awaiting
approval); the decisions are ExecutorService.DecideToolCall (admin tokens)."""

from __future__ import annotations

import argparse
import json
import uuid
from collections.abc import Callable

from google.protobuf import json_format
from rich.text import Text

from agentfleet.cli.client import CliError, Connection
from agentfleet.cli.render import console, print_json, timestamp, to_dict
from agentfleet.v1 import common_pb2, executor_pb2, history_pb2


def add_approval_commands(
    commands: argparse._SubParsersAction,  # type: ignore[type-arg]
    command: Callable[..., argparse.ArgumentParser],
) -> None:
    """Adds approvals, approve and reject; ``command`` makes a leaf command parser
    (:func:`agentfleet.cli.commands._command`)."""
    approvals = command(
        commands, "approvals", "list tool calls waiting for approval", "approvals:list_approvals"
    )
    approvals.add_argument("--run", metavar="RUN", help="only this run's calls")
    for name, handler, help_ in (
        ("approve", "approvals:approve_call", "approve a tool call that waits (admin)"),
        ("reject", "approvals:reject_call", "reject a tool call that waits (admin)"),
    ):
        parser = command(commands, name, help_, handler)
        parser.add_argument("run_id", metavar="RUN")
        parser.add_argument("tool_call_id", metavar="CALL")
        parser.add_argument("--reason", required=name == "reject", help="why (the model reads it)")
        parser.add_argument("--request-id", help="idempotency key (default: a new UUID)")
        if name == "approve":
            parser.add_argument(
                "--arguments", metavar="JSON", help="run the call with these arguments instead"
            )


async def list_approvals(conn: Connection, args: argparse.Namespace) -> int:
    history = conn.history()
    if args.run:
        run_ids = [args.run]
    else:
        runs = await history.ListRuns(
            history_pb2.ListRunsRequest(
                project_id=conn.project,
                page_size=500,
                statuses=[common_pb2.RUN_STATUS_WAITING],
                include_internal_agents=True,
            )
        )
        run_ids = [r.id for r in runs.runs]
    waiting = 0
    for run_id in run_ids:
        calls = await history.ListRunToolCalls(
            history_pb2.ListRunToolCallsRequest(
                project_id=conn.project,
                run_id=run_id,
                page_size=500,
                statuses=[common_pb2.TOOL_CALL_STATUS_AWAITING_APPROVAL],
            )
        )
        for summary in calls.tool_calls:
            # The listing carries only input_size_bytes: the arguments a person approves
            # come from GetRunToolCall, one call at a time.
            call = (
                await history.GetRunToolCall(
                    history_pb2.GetRunToolCallRequest(
                        project_id=conn.project, run_id=run_id, tool_call_id=summary.tool_call_id
                    )
                )
            ).tool_call
            waiting += 1
            if args.json:
                print_json(call)
                continue
            # In full, not cut to a table cell: what is approved must be seen whole.
            arguments = json.dumps(to_dict(call).get("input", {}), sort_keys=True)
            console.print(
                Text.assemble(
                    (f"run {run_id}  call {call.tool_call_id}  ", "dim"),
                    (call.tool_name, "bold"),
                    f"  step {call.step}  since {timestamp(call.create_time)}",
                )
            )
            console.print(Text(f"  arguments {arguments}"), soft_wrap=True)
    if not args.json and not waiting:
        console.print("nothing waits for approval")
    return 0


async def approve_call(conn: Connection, args: argparse.Namespace) -> int:
    request = _decision(conn, args, executor_pb2.TOOL_CALL_DECISION_APPROVE)
    if args.arguments:
        try:
            json_format.ParseDict(json.loads(args.arguments), request.arguments)
        except (ValueError, json_format.ParseError) as exc:
            raise CliError("INVALID_ARGUMENT", f"--arguments is not a JSON object: {exc}") from exc
    return await _decide(conn, args, request)


async def reject_call(conn: Connection, args: argparse.Namespace) -> int:
    return await _decide(conn, args, _decision(conn, args, executor_pb2.TOOL_CALL_DECISION_REJECT))


def _decision(
    conn: Connection, args: argparse.Namespace, decision: int
) -> executor_pb2.DecideToolCallRequest:
    return executor_pb2.DecideToolCallRequest(
        project_id=conn.project,
        run_id=args.run_id,
        tool_call_id=args.tool_call_id,
        decision=decision,  # type: ignore[arg-type]
        reason=args.reason or "",
        request_id=args.request_id or str(uuid.uuid4()),
    )


async def _decide(
    conn: Connection, args: argparse.Namespace, request: executor_pb2.DecideToolCallRequest
) -> int:
    reply = await conn.executor().DecideToolCall(request)
    if args.json:
        print_json(reply)
        return 0
    status = common_pb2.ToolCallStatus.Name(reply.status).removeprefix("TOOL_CALL_STATUS_")
    run_status = common_pb2.RunStatus.Name(reply.run.status).removeprefix("RUN_STATUS_")
    console.print(
        f"{request.tool_call_id}: {status.lower()}; run {reply.run.id} {run_status.lower()}"
    )
    if reply.waiting_tool_call_ids:
        console.print(f"still waiting: {', '.join(reply.waiting_tool_call_ids)}")
    return 0
