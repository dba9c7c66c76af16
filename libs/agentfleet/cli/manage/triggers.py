"""``agentfleet emit``, ``agentfleet firings`` and ``agentfleet schedule add|list|pause|
resume|rm``: TriggerService (issue 32)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from google.protobuf.struct_pb2 import Struct
from rich.text import Text

from agentfleet.cli.client import CliError, Connection
from agentfleet.cli.render import console, print_json, print_listing, timestamp
from agentfleet.v1 import triggers_pb2


def add_trigger_commands(
    commands: argparse._SubParsersAction,  # type: ignore[type-arg]
    command: Callable[..., argparse.ArgumentParser],
    group: Callable[..., Any],
    paging: Callable[[argparse.ArgumentParser], None],
) -> None:
    """Adds emit, firings and schedule (the parser helpers are commands.py's)."""
    emit = command(
        commands,
        "emit",
        "emit an event: agents on_event:<name> start",
        "manage.triggers:emit_event",
    )
    emit.add_argument("name", help="event name")
    emit.add_argument("--payload", default="{}", help="JSON object, the runs' input data")
    emit.add_argument("--request-id", required=True, help="idempotency key: fires once per id")

    firings = command(
        commands,
        "firings",
        "what triggers did: fired or skipped and why",
        "manage.triggers:firings",
    )
    firings.add_argument("--agent")
    firings.add_argument("--outcome", choices=["fired", "skipped"])
    paging(firings)

    with group(
        commands, "schedule", "cron schedules of agents", "manage.triggers:schedule"
    ) as actions:
        add = actions.add_parser("add", help="add a schedule")
        add.add_argument("name")
        add.add_argument("--agent", required=True)
        add.add_argument("--cron", required=True, help="e.g. '0 9 * * 1-5'")
        add.add_argument("--tz", default="UTC", help="IANA time zone (default UTC)")
        add.add_argument("--input", required=True, help="each run's input")
        add.add_argument("--catch-up", choices=["skip", "one"], default="skip")
        actions.add_parser("list", help="list schedules with their next fire times")
        for action, text in (("pause", "pause"), ("resume", "resume"), ("rm", "delete")):
            actions.add_parser(action, help=f"{text} a schedule").add_argument("name")


async def emit_event(conn: Connection, args: argparse.Namespace) -> int:
    try:
        payload = json.loads(args.payload)
    except ValueError:
        raise CliError("INVALID_ARGUMENT", "--payload: not JSON") from None
    if not isinstance(payload, dict):
        raise CliError("INVALID_ARGUMENT", "--payload: must be a JSON object")
    struct = Struct()
    struct.update(payload)
    reply = await conn.triggers().EmitEvent(
        triggers_pb2.EmitEventRequest(
            project_id=conn.project, name=args.name, payload=struct, request_id=args.request_id
        )
    )
    if args.json:
        print_json(reply)
    else:
        seen = "" if reply.created else " (already emitted under this request id)"
        console.print(f"event {reply.event_id}{seen}")
    return 0


async def firings(conn: Connection, args: argparse.Namespace) -> int:
    reply = await conn.triggers().ListTriggerFirings(
        triggers_pb2.ListTriggerFiringsRequest(
            project_id=conn.project,
            page_size=args.limit,
            page_token=args.page_token or "",
            agent_name=args.agent or "",
            outcome=args.outcome or "",
        )
    )
    return print_listing(
        reply,
        reply.firings,
        ("when", "agent", "trigger", "outcome", "run / reason", "depth"),
        _firing_row,
        json_mode=args.json,
        next_page_token=reply.next_page_token,
    )


def _firing_row(firing: triggers_pb2.TriggerFiring) -> tuple[str | Text, ...]:
    fired = firing.outcome == "fired"
    return (
        timestamp(firing.create_time),
        firing.agent_name,
        firing.trigger,
        Text(firing.outcome, style="green" if fired else "yellow"),
        firing.run_id if fired else firing.reason,
        str(firing.chain_depth),
    )


async def schedule(conn: Connection, args: argparse.Namespace) -> int:
    stub = conn.triggers()
    action = args.schedule_command
    if action == "add":
        wanted = triggers_pb2.Schedule(
            name=args.name,
            agent_name=args.agent,
            cron=args.cron,
            time_zone=args.tz,
            input=args.input,
            catch_up=args.catch_up,
        )
        reply = await stub.CreateSchedule(
            triggers_pb2.CreateScheduleRequest(project_id=conn.project, schedule=wanted)
        )
        return _one(reply.schedule, args)
    if action in ("pause", "resume"):
        reply = await stub.SetSchedulePaused(
            triggers_pb2.SetSchedulePausedRequest(
                project_id=conn.project, name=args.name, paused=action == "pause"
            )
        )
        return _one(reply.schedule, args)
    if action == "rm":
        await stub.DeleteSchedule(
            triggers_pb2.DeleteScheduleRequest(project_id=conn.project, name=args.name)
        )
        if not args.json:
            console.print(f"deleted schedule {args.name}")
        return 0
    listed = await stub.ListSchedules(triggers_pb2.ListSchedulesRequest(project_id=conn.project))
    return print_listing(
        listed,
        listed.schedules,
        ("schedule", "agent", "cron", "zone", "catch-up", "state", "next"),
        _schedule_row,
        json_mode=args.json,
    )


def _one(found: triggers_pb2.Schedule, args: argparse.Namespace) -> int:
    if args.json:
        print_json(found)
    else:
        state = "paused" if found.paused else f"next {timestamp(found.next_fire_time)} UTC"
        console.print(f"schedule {found.name}: {found.agent_name} at {found.cron!r}, {state}")
    return 0


def _schedule_row(found: triggers_pb2.Schedule) -> tuple[str | Text, ...]:
    return (
        found.name,
        found.agent_name,
        found.cron,
        found.time_zone,
        found.catch_up,
        "paused" if found.paused else "active",
        "" if found.paused else timestamp(found.next_fire_time),
    )
