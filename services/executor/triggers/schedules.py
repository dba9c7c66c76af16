"""Schedules: cron expressions in a time zone that start an agent (``kb.trigger_schedules``).

Times come from croniter (pinned in pyproject.toml) on zone-aware datetimes, so a
schedule at 02:30 Europe/Paris fires at 03:00 on the day the clocks skip 02:30 and once
on the day they repeat it. Five fields (minute hour day month weekday), or six with
croniter's seconds field last; ticks closer than AGENTFLEET_SCHEDULE_MIN_INTERVAL_S are
refused.

Each executor's :class:`ScheduleTicker` claims due schedules with ``FOR UPDATE SKIP
LOCKED`` and, in the same transaction, writes the tick to the outbox (unique per schedule
and tick) and moves ``next_fire_at`` past now: a tick is written once whatever the number
of replicas, and the consumer starts its run exactly once like any event. After downtime,
``catch_up`` decides: ``skip`` writes the missed ticks as one skipped firing
(missed_ticks), ``one`` starts one run for them all.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import itertools
import re
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import asyncpg
import structlog
from croniter import croniter

from agentfleet.errors import (
    AlreadyExists,
    FailedPrecondition,
    FieldViolation,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
)
from agentfleet.reconnect import is_disconnect
from agentfleet.settings.trigger_limits import TriggerLimits

__all__ = [
    "Schedule",
    "ScheduleRepository",
    "ScheduleTicker",
    "next_fire_times",
    "schedule_violations",
]

log = structlog.get_logger(__name__)

NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.\-]{0,99}$")
CATCH_UP = ("skip", "one")
MAX_INPUT_BYTES = 64 * 1024
INTERVAL_SAMPLES = 24
"""Consecutive ticks whose gaps are checked against the minimum interval (a cron like
``0,1 * * * *`` has one short gap an hour: 24 samples see it)."""
CLAIM_BATCH = 20
LATE_AFTER_S = 5.0
"""A tick written more than this after its time was missed (no executor ticked then): its
schedule's catch_up applies. Less is the ticker's own latency (it polls every second), not
downtime; it is under the smallest interval a deployment should allow."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Schedule:
    """One row of ``kb.trigger_schedules``."""

    id: str
    project_id: str
    name: str
    agent_name: str
    cron: str
    time_zone: str
    input: str
    catch_up: str
    paused: bool
    next_fire_at: dt.datetime | None
    """None until the ticker computes it (a definition's schedule, new or changed)."""
    last_fire_at: dt.datetime | None
    definition_id: str | None = None
    """The definition whose config.schedule this is; None for CreateSchedule's."""

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> Schedule:
        values = {f.name: row[f.name] for f in dataclasses.fields(cls)}
        values["id"] = str(values["id"])
        if values["definition_id"] is not None:
            values["definition_id"] = str(values["definition_id"])
        return cls(**values)


def next_fire_times(cron: str, time_zone: str, after: dt.datetime, count: int) -> list[dt.datetime]:
    """The ``count`` ticks of ``cron`` in ``time_zone`` strictly after ``after``, in UTC."""
    it = croniter(cron, after.astimezone(ZoneInfo(time_zone or "UTC")))
    return [it.get_next(dt.datetime).astimezone(dt.UTC) for _ in range(count)]


def schedule_violations(
    *,
    name: str,
    agent_name: str,
    cron: str,
    time_zone: str,
    input_text: str,
    catch_up: str,
    min_interval_s: int,
) -> list[FieldViolation]:
    """Every bad field of a schedule (``schedule.<field>``), at once."""
    out: list[FieldViolation] = []
    if not NAME.match(name):
        out.append(
            FieldViolation("schedule.name", "must be a letter, then letters, digits, _ . - (100)")
        )
    if not agent_name:
        out.append(FieldViolation("schedule.agent_name", "is required"))
    if not input_text.strip():
        out.append(FieldViolation("schedule.input", "is required"))
    elif len(input_text.encode()) > MAX_INPUT_BYTES:
        out.append(FieldViolation("schedule.input", f"is larger than {MAX_INPUT_BYTES} bytes"))
    if catch_up not in CATCH_UP:
        out.append(FieldViolation("schedule.catch_up", "must be skip or one"))
    zone_ok = True
    try:
        ZoneInfo(time_zone or "UTC")
    except (ZoneInfoNotFoundError, ValueError):
        zone_ok = False
        out.append(FieldViolation("schedule.time_zone", f"unknown time zone {time_zone[:60]!r}"))
    if len(cron) > 200 or len(cron.split()) not in (5, 6) or not croniter.is_valid(cron):
        out.append(
            FieldViolation(
                "schedule.cron",
                "must be a cron expression of 5 fields (minute hour day month weekday), or 6 "
                "with seconds last",
            )
        )
    elif zone_ok:
        ticks = next_fire_times(cron, time_zone, dt.datetime.now(dt.UTC), INTERVAL_SAMPLES)
        gap = min((b - a).total_seconds() for a, b in itertools.pairwise(ticks))
        if gap < min_interval_s:
            out.append(
                FieldViolation(
                    "schedule.cron",
                    f"fires {gap:g} s apart; at least AGENTFLEET_SCHEDULE_MIN_INTERVAL_S "
                    f"({min_interval_s} s)",
                )
            )
    return out


class ScheduleRepository:
    """Every statement on ``kb.trigger_schedules``; each scoped by project."""

    def __init__(self, pool: asyncpg.Pool, limits: TriggerLimits) -> None:
        self._pool = pool
        self._limits = limits

    async def create(
        self,
        project_id: str,
        *,
        name: str,
        agent_name: str,
        cron: str,
        time_zone: str,
        input_text: str,
        catch_up: str,
    ) -> Schedule:
        """Stores a checked schedule; :class:`ResourceExhausted` past the project's cap,
        :class:`AlreadyExists` for a taken name."""
        first = next_fire_times(cron, time_zone, dt.datetime.now(dt.UTC), 1)[0]
        cap = self._limits.max_schedules_per_project
        async with self._pool.acquire() as conn, conn.transaction():
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
                f"agentfleet.schedules:{project_id}",
            )
            count = await conn.fetchval(
                "SELECT count(*) FROM kb.trigger_schedules WHERE project_id = $1", project_id
            )
            if count >= cap:
                raise ResourceExhausted(
                    f"project {project_id!r} has {cap} schedules, the limit set by "
                    "AGENTFLEET_MAX_SCHEDULES_PER_PROJECT"
                )
            try:
                row = await conn.fetchrow(
                    """
                    INSERT INTO kb.trigger_schedules (project_id, name, agent_name, cron,
                                                      time_zone, input, catch_up, next_fire_at)
                    VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
                    RETURNING *
                    """,
                    project_id,
                    name,
                    agent_name,
                    cron,
                    time_zone or "UTC",
                    input_text,
                    catch_up,
                    first,
                )
            except asyncpg.UniqueViolationError as exc:
                raise AlreadyExists(f"schedule {name!r} already exists") from exc
        return Schedule.from_row(row)

    async def list(self, project_id: str) -> list[Schedule]:
        """The project's schedules by name (at most its cap)."""
        rows = await self._pool.fetch(
            "SELECT * FROM kb.trigger_schedules WHERE project_id = $1 ORDER BY name LIMIT $2",
            project_id,
            self._limits.max_schedules_per_project,
        )
        return [Schedule.from_row(r) for r in rows]

    async def set_paused(self, project_id: str, name: str, paused: bool) -> Schedule:
        """Pauses or resumes; a resumed schedule's next tick is its first after now."""
        async with self._pool.acquire() as conn, conn.transaction():
            row = await conn.fetchrow(
                "SELECT * FROM kb.trigger_schedules WHERE project_id = $1 AND name = $2 FOR UPDATE",
                project_id,
                name,
            )
            if row is None:
                raise NotFound(f"schedule {name!r} not found")
            current = Schedule.from_row(row)
            next_at = current.next_fire_at
            if not paused and current.paused:
                next_at = next_fire_times(
                    current.cron, current.time_zone, dt.datetime.now(dt.UTC), 1
                )[0]
            row = await conn.fetchrow(
                """
                UPDATE kb.trigger_schedules
                SET paused = $3, next_fire_at = $4, updated_at = now()
                WHERE project_id = $1 AND name = $2
                RETURNING *
                """,
                project_id,
                name,
                paused,
                next_at,
            )
        return Schedule.from_row(row)

    async def delete(self, project_id: str, name: str) -> None:
        """Deletes the schedule; :class:`NotFound` when the project has none of that name,
        :class:`FailedPrecondition` for a definition's own (its config.schedule says it)."""
        deleted = await self._pool.fetchrow(
            "DELETE FROM kb.trigger_schedules WHERE project_id = $1 AND name = $2"
            " AND definition_id IS NULL RETURNING id",
            project_id,
            name,
        )
        if deleted is not None:
            return
        owner = await self._pool.fetchval(
            "SELECT agent_name FROM kb.trigger_schedules WHERE project_id = $1 AND name = $2",
            project_id,
            name,
        )
        if owner is None:
            raise NotFound(f"schedule {name!r} not found")
        raise FailedPrecondition(
            f"schedule {name!r} is agent {owner!r}'s config.schedule: change the definition "
            "(or pause the schedule)"
        )


_CLAIM_DUE = """
SELECT * FROM kb.trigger_schedules
WHERE NOT paused AND (next_fire_at <= now() OR next_fire_at IS NULL)
ORDER BY next_fire_at NULLS FIRST
LIMIT $1
FOR UPDATE SKIP LOCKED
"""

_WRITE_TICK = """
INSERT INTO kb.trigger_outbox (project_id, kind, schedule_id, tick_at, payload)
VALUES ($1, 'schedule', $2, $3, $4::jsonb)
ON CONFLICT (schedule_id, tick_at) WHERE schedule_id IS NOT NULL DO NOTHING
"""


class ScheduleTicker:
    """Writes due ticks to the outbox; one per executor process, any number of them."""

    def __init__(self, pool: asyncpg.Pool, *, poll_s: float = 1.0) -> None:
        self._pool = pool
        self._poll_s = poll_s

    async def run(self, stop: asyncio.Event) -> None:
        """Ticks until ``stop``, every ``poll_s``."""
        while not stop.is_set():
            try:
                while await self.tick() >= CLAIM_BATCH:
                    pass
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                if not is_disconnect(exc) and not stop.is_set():
                    log.exception("schedule ticker failed; retrying")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self._poll_s)

    async def tick(self) -> int:
        """Writes the ticks of the schedules due now; how many schedules were due."""
        async with self._pool.acquire() as conn, conn.transaction():
            rows = await conn.fetch(_CLAIM_DUE, CLAIM_BATCH)
            now = await conn.fetchval("SELECT now()")
            for row in rows:
                await self._write_or_pause(conn, Schedule.from_row(row), now)
            if rows:
                await conn.execute("SELECT pg_notify('agentfleet_trigger_outbox', 'schedule')")
        return len(rows)

    async def _write_or_pause(
        self, conn: asyncpg.Connection, schedule: Schedule, now: dt.datetime
    ) -> None:
        """Writes the tick; a schedule whose row cannot be ticked (a cron or zone written by
        hand past the RPC's checks) is paused, so it does not stop every other schedule."""
        try:
            async with conn.transaction():
                if schedule.next_fire_at is None:
                    await self._compute_first(conn, schedule, now)
                else:
                    await self._write(conn, schedule, now)
        except Exception as exc:
            if is_disconnect(exc):
                raise
            log.exception("schedule cannot be ticked; paused", schedule_id=schedule.id)
            await conn.execute(
                "UPDATE kb.trigger_schedules SET paused = true, updated_at = now() WHERE id = $1",
                schedule.id,
            )

    async def _compute_first(
        self, conn: asyncpg.Connection, schedule: Schedule, now: dt.datetime
    ) -> None:
        """A new or changed schedule of a definition: its first tick after now, no run."""
        first = next_fire_times(schedule.cron, schedule.time_zone, now, 1)[0]
        await conn.execute(
            "UPDATE kb.trigger_schedules SET next_fire_at = $2 WHERE id = $1", schedule.id, first
        )

    async def _write(self, conn: asyncpg.Connection, schedule: Schedule, now: dt.datetime) -> None:
        due = schedule.next_fire_at
        assert due is not None  # _write_or_pause computed it first
        following = next_fire_times(schedule.cron, schedule.time_zone, now, 1)[0]
        payload: dict[str, object] = {
            "agent_name": schedule.agent_name,
            "schedule": schedule.name,
            "input": schedule.input,
        }
        if (now - due).total_seconds() > LATE_AFTER_S:
            missed = _ticks_between(schedule, due, now)
            payload["missed_ticks"] = missed
            if schedule.catch_up == "skip":
                payload["skip"] = (
                    f"missed_ticks: {missed} tick(s) from {due.isoformat()} passed while no "
                    "executor ticked (catch_up skip); it fires again at its next tick"
                )
        await conn.execute(_WRITE_TICK, schedule.project_id, schedule.id, due, payload)
        await conn.execute(
            "UPDATE kb.trigger_schedules SET next_fire_at = $2, last_fire_at = $3 WHERE id = $1",
            schedule.id,
            following,
            due,
        )


def _ticks_between(schedule: Schedule, due: dt.datetime, now: dt.datetime) -> int:
    """Ticks from ``due`` to ``now``, counted up to :data:`INTERVAL_SAMPLES` (a long
    downtime of a frequent schedule is "24 or more", not a walk over every tick)."""
    later = next_fire_times(schedule.cron, schedule.time_zone, due, INTERVAL_SAMPLES - 1)
    return 1 + sum(1 for t in later if t <= now)


def reraise_invalid(violations: list[FieldViolation]) -> None:
    """:class:`InvalidArgument` listing ``violations`` when there are any."""
    if violations:
        raise InvalidArgument.for_fields(violations)
