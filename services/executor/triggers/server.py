"""TriggerService: protobuf <-> domain for external events, firings and schedules.

The interceptor has checked (or filled in) ``project_id`` against the caller's token, so a
member reaches only its own project's events, firings and schedules.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from dataclasses import dataclass
from typing import Any

import grpc

from agentfleet.errors import FieldViolation, InvalidArgument
from agentfleet.observability.telemetry import current_traceparent
from agentfleet.postgres.pagination import clamp_page_size, decode_page_token, encode_page_token
from agentfleet.request_ids import check_same_request, request_fingerprint, request_id_violations
from agentfleet.settings.trigger_limits import TriggerLimits
from agentfleet.structs import struct_dict
from agentfleet.timestamps import timestamp_proto
from agentfleet.v1 import triggers_pb2, triggers_pb2_grpc
from services.executor.registry.definitions import DefinitionRepository
from services.executor.triggers import store
from services.executor.triggers.grammar import EVENT_NAME
from services.executor.triggers.schedules import (
    Schedule,
    ScheduleRepository,
    next_fire_times,
    reraise_invalid,
    schedule_violations,
)

__all__ = ["TriggerServicer"]

MAX_FIRINGS_PAGE = 200
UPCOMING = 3
"""Fire times a listed schedule shows after its next one."""


@dataclass(frozen=True, slots=True)
class TriggerServicer(triggers_pb2_grpc.TriggerServiceServicer):
    """External events, trigger firings and schedules of a project."""

    pool: Any
    definitions: DefinitionRepository
    schedules: ScheduleRepository
    limits: TriggerLimits

    async def EmitEvent(
        self, request: triggers_pb2.EmitEventRequest, context: grpc.aio.ServicerContext
    ) -> triggers_pb2.EmitEventResponse:
        problems: list[FieldViolation] = []
        if not EVENT_NAME.match(request.name):
            problems.append(
                FieldViolation("name", "must be a letter, then letters, digits, _ . - (100)")
            )
        if not request.request_id:
            problems.append(FieldViolation("request_id", "is required: an event fires once per id"))
        problems += request_id_violations(request.request_id)
        payload = struct_dict(request.payload) if request.HasField("payload") else {}
        size = len(json.dumps(payload, separators=(",", ":")).encode())
        if size > self.limits.max_event_payload_bytes:
            problems.append(
                FieldViolation(
                    "payload",
                    f"is {size} bytes of JSON; at most {self.limits.max_event_payload_bytes} "
                    "(AGENTFLEET_EVENT_MAX_PAYLOAD_BYTES)",
                )
            )
        if problems:
            raise InvalidArgument.for_fields(problems)
        fingerprint = request_fingerprint({"name": request.name, "payload": payload})
        event_id, created, stored = await store.insert_event(
            self.pool,
            project_id=request.project_id,
            name=request.name,
            payload=payload,
            request_id=request.request_id,
            request_fingerprint=fingerprint,
            # The RPC's server span: the runs the event starts join the emitter's trace.
            traceparent=current_traceparent(),
        )
        if not created:
            check_same_request(stored, fingerprint)
        return triggers_pb2.EmitEventResponse(event_id=event_id, created=created)

    async def ListTriggerFirings(
        self, request: triggers_pb2.ListTriggerFiringsRequest, context: grpc.aio.ServicerContext
    ) -> triggers_pb2.ListTriggerFiringsResponse:
        if request.outcome not in ("", "fired", "skipped"):
            raise InvalidArgument.for_field("outcome", "must be fired, skipped or empty")
        size = min(clamp_page_size(request.page_size), MAX_FIRINGS_PAGE)
        filters = {
            "project_id": request.project_id,
            "agent_name": request.agent_name,
            "outcome": request.outcome,
        }
        position = decode_page_token(request.page_token, filters, kinds=(dt.datetime, uuid.UUID))
        rows = await store.list_firings(
            self.pool,
            request.project_id,
            agent_name=request.agent_name or None,
            outcome=request.outcome or None,
            after=(position[0], str(position[1])) if position else None,
            limit=size + 1,
        )
        token = ""
        if len(rows) > size:
            last = rows[size - 1]
            token = encode_page_token([last.created_at, last.id], filters)
        return triggers_pb2.ListTriggerFiringsResponse(
            firings=[_firing(f) for f in rows[:size]], next_page_token=token
        )

    async def CreateSchedule(
        self, request: triggers_pb2.CreateScheduleRequest, context: grpc.aio.ServicerContext
    ) -> triggers_pb2.CreateScheduleResponse:
        wanted = request.schedule
        catch_up = wanted.catch_up or "skip"
        reraise_invalid(
            schedule_violations(
                name=wanted.name,
                agent_name=wanted.agent_name,
                cron=wanted.cron,
                time_zone=wanted.time_zone or "UTC",
                input_text=wanted.input,
                catch_up=catch_up,
                min_interval_s=self.limits.schedule_min_interval_s,
            )
        )
        # NotFound naming the agent when the project has none of that name.
        await self.definitions.get(request.project_id, wanted.agent_name)
        created = await self.schedules.create(
            request.project_id,
            name=wanted.name,
            agent_name=wanted.agent_name,
            cron=wanted.cron,
            time_zone=wanted.time_zone or "UTC",
            input_text=wanted.input,
            catch_up=catch_up,
        )
        return triggers_pb2.CreateScheduleResponse(schedule=_schedule(created))

    async def ListSchedules(
        self, request: triggers_pb2.ListSchedulesRequest, context: grpc.aio.ServicerContext
    ) -> triggers_pb2.ListSchedulesResponse:
        listed = await self.schedules.list(request.project_id)
        return triggers_pb2.ListSchedulesResponse(schedules=[_schedule(s) for s in listed])

    async def SetSchedulePaused(
        self, request: triggers_pb2.SetSchedulePausedRequest, context: grpc.aio.ServicerContext
    ) -> triggers_pb2.SetSchedulePausedResponse:
        _require_name(request.name)
        changed = await self.schedules.set_paused(request.project_id, request.name, request.paused)
        return triggers_pb2.SetSchedulePausedResponse(schedule=_schedule(changed))

    async def DeleteSchedule(
        self, request: triggers_pb2.DeleteScheduleRequest, context: grpc.aio.ServicerContext
    ) -> triggers_pb2.DeleteScheduleResponse:
        _require_name(request.name)
        await self.schedules.delete(request.project_id, request.name)
        return triggers_pb2.DeleteScheduleResponse()


def _require_name(name: str) -> None:
    if not name:
        raise InvalidArgument.for_field("name", "is required")


def _firing(firing: store.Firing) -> triggers_pb2.TriggerFiring:
    return triggers_pb2.TriggerFiring(
        id=firing.id,
        project_id=firing.project_id,
        event_id=firing.outbox_id,
        agent_name=firing.agent_name,
        trigger=firing.trigger,
        outcome=firing.outcome,
        reason=firing.reason or "",
        run_id=firing.run_id or "",
        object_id=firing.object_id or "",
        event_name=firing.event_name or "",
        schedule_id=firing.schedule_id or "",
        chain_depth=firing.chain_depth,
        create_time=timestamp_proto(firing.created_at),
    )


def _schedule(schedule: Schedule) -> triggers_pb2.Schedule:
    start = schedule.next_fire_at or dt.datetime.now(dt.UTC)
    upcoming = next_fire_times(schedule.cron, schedule.time_zone, start, UPCOMING)
    message = triggers_pb2.Schedule(
        id=schedule.id,
        project_id=schedule.project_id,
        name=schedule.name,
        agent_name=schedule.agent_name,
        cron=schedule.cron,
        time_zone=schedule.time_zone,
        input=schedule.input,
        catch_up=schedule.catch_up,
        paused=schedule.paused,
        upcoming_fire_times=[timestamp_proto(t) for t in upcoming],
    )
    if schedule.next_fire_at is not None:
        message.next_fire_time.CopyFrom(timestamp_proto(schedule.next_fire_at))
    if schedule.last_fire_at is not None:
        message.last_fire_time.CopyFrom(timestamp_proto(schedule.last_fire_at))
    return message
