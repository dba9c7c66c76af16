"""Every statement on ``kb.trigger_outbox`` and ``kb.trigger_firings`` (migration 0027).

Functions take the caller's pool or connection: the consumer owns the transaction in which
a row is claimed, its runs queued, its firings recorded and the row marked consumed.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Sequence
from typing import Any, Literal

import asyncpg

Db = asyncpg.Pool | asyncpg.Connection
OUTBOX_CHANNEL = "agentfleet_trigger_outbox"
"""NOTIFY channel of new outbox rows (payload: the project), sent at their commit."""

Outcome = Literal["fired", "skipped"]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class OutboxEvent:
    """One row of ``kb.trigger_outbox``."""

    id: int
    project_id: str
    kind: Literal["object_created", "object_updated", "event", "schedule"]
    object_id: str | None
    object_type: str | None
    event_name: str | None
    request_id: str | None
    payload: dict[str, Any] | None
    schedule_id: str | None
    tick_at: dt.datetime | None
    source_run_id: str | None
    agent_names: list[str] | None
    """A graph event's listeners whose filter matched the write."""
    created_at: dt.datetime
    traceparent: str | None = None
    """W3C traceparent of the span that wrote the event (migration 0032): the runs it
    starts are below that span, in the writer's trace."""

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> OutboxEvent:
        values = {f.name: row[f.name] for f in dataclasses.fields(cls)}
        values["agent_names"] = list(values["agent_names"]) if values["agent_names"] else None
        for key in ("object_id", "schedule_id", "source_run_id"):
            if values[key] is not None:
                values[key] = str(values[key])
        return cls(**values)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ListeningAgent:
    """A definition whose trigger names an event."""

    id: str
    name: str
    trigger: str
    config: dict[str, Any]
    max_steps: int | None
    default_timeout_s: float | None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Firing:
    """One row of ``kb.trigger_firings``."""

    id: str
    project_id: str
    outbox_id: int
    agent_name: str
    trigger: str
    outcome: Outcome
    reason: str | None
    run_id: str | None
    object_id: str | None
    event_name: str | None
    schedule_id: str | None
    chain_depth: int
    created_at: dt.datetime

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> Firing:
        values = {f.name: row[f.name] for f in dataclasses.fields(cls)}
        for key in ("id", "run_id", "object_id", "schedule_id"):
            if values[key] is not None:
                values[key] = str(values[key])
        return cls(**values)


_CLAIM = """
SELECT * FROM kb.trigger_outbox
WHERE consumed_at IS NULL
ORDER BY id
LIMIT 1
FOR UPDATE SKIP LOCKED
"""


async def claim_next(conn: asyncpg.Connection) -> OutboxEvent | None:
    """The oldest unconsumed event no other consumer holds, locked until the caller's
    transaction ends (a consumer killed mid-way releases it with its connection)."""
    row = await conn.fetchrow(_CLAIM)
    return OutboxEvent.from_row(row) if row is not None else None


async def mark_consumed(conn: asyncpg.Connection, outbox_id: int) -> None:
    """The event has been acted on (in the transaction that acted)."""
    await conn.execute(
        "UPDATE kb.trigger_outbox SET consumed_at = now() WHERE id = $1 AND consumed_at IS NULL",
        outbox_id,
    )


async def listening_agents(
    conn: asyncpg.Connection,
    project_id: str,
    triggers: Sequence[str],
    limit: int,
    *,
    names: Sequence[str] | None = None,
) -> list[ListeningAgent]:
    """The project's definitions whose trigger is one of ``triggers`` (and, given
    ``names``, named so), by name, at most ``limit`` (agent_definitions_trigger_idx)."""
    rows = await conn.fetch(
        """
        SELECT id, name, trigger, config, max_steps, default_timeout_s
        FROM kb.agent_definitions
        WHERE project_id = $1 AND trigger = ANY($2::text[])
          AND ($4::text[] IS NULL OR name = ANY($4::text[]))
        ORDER BY name
        LIMIT $3
        """,
        project_id,
        list(triggers),
        limit,
        list(names) if names is not None else None,
    )
    return [
        ListeningAgent(
            id=str(r["id"]),
            name=r["name"],
            trigger=r["trigger"],
            config=dict(r["config"] or {}),
            max_steps=r["max_steps"],
            default_timeout_s=r["default_timeout_s"],
        )
        for r in rows
    ]


async def chain_depth_of(conn: asyncpg.Connection, project_id: str, run_id: str) -> int:
    """The chain depth of ``run_id``'s tree (its root's: children write on its behalf); 0
    for a run of another project or none (a forged source run extends nothing)."""
    depth = await conn.fetchval(
        """
        SELECT root.chain_depth FROM kb.agent_runs r
        JOIN kb.agent_runs root ON root.id = r.root_run_id
        WHERE r.project_id = $1 AND r.id = $2::uuid
        """,
        project_id,
        run_id,
    )
    return int(depth or 0)


async def fired_since(
    conn: asyncpg.Connection, project_id: str, since: dt.datetime, cap: int
) -> int:
    """Firings of the project that started a run since ``since``, counted up to ``cap``."""
    return int(
        await conn.fetchval(
            """
            SELECT count(*) FROM (
                SELECT 1 FROM kb.trigger_firings
                WHERE project_id = $1 AND created_at >= $2 AND outcome = 'fired'
                LIMIT $3) recent
            """,
            project_id,
            since,
            cap,
        )
    )


async def queued_triggered(conn: asyncpg.Connection, project_id: str, cap: int) -> int:
    """The project's queued runs that a trigger started, counted up to ``cap``
    (agent_runs_queued_triggered_idx)."""
    return int(
        await conn.fetchval(
            """
            SELECT count(*) FROM (
                SELECT 1 FROM kb.agent_runs
                WHERE project_id = $1 AND status = 'queued' AND chain_depth > 0
                LIMIT $2) queued
            """,
            project_id,
            cap,
        )
    )


async def insert_firing(
    conn: asyncpg.Connection,
    event: OutboxEvent,
    *,
    agent_name: str,
    trigger: str,
    outcome: Outcome,
    reason: str | None,
    run_id: str | None,
    chain_depth: int,
) -> None:
    """Records what ``agent_name``'s trigger did with ``event``; once per (event, agent)."""
    await conn.execute(
        """
        INSERT INTO kb.trigger_firings (project_id, outbox_id, agent_name, trigger, outcome,
                                        reason, run_id, object_id, event_name, schedule_id,
                                        chain_depth)
        VALUES ($1, $2, $3, $4, $5, $6, $7::uuid, $8::uuid, $9, $10::uuid, $11)
        ON CONFLICT (outbox_id, agent_name) DO NOTHING
        """,
        event.project_id,
        event.id,
        agent_name,
        trigger,
        outcome,
        reason,
        run_id,
        event.object_id,
        event.event_name,
        event.schedule_id,
        chain_depth,
    )


async def insert_event(
    db: Db,
    *,
    project_id: str,
    name: str,
    payload: dict[str, Any],
    request_id: str,
    request_fingerprint: str,
    traceparent: str | None = None,
) -> tuple[int, bool, str | None]:
    """An external event's outbox row (NOTIFY at commit): its id and True, or the id and
    fingerprint of the project's earlier event of ``request_id`` and False."""
    row = await db.fetchrow(
        f"""
        WITH inserted AS (
            INSERT INTO kb.trigger_outbox (project_id, kind, event_name, payload, request_id,
                                           request_fingerprint, traceparent)
            VALUES ($1, 'event', $2, $3::jsonb, $4, $5, $6)
            ON CONFLICT (project_id, request_id) WHERE request_id IS NOT NULL DO NOTHING
            RETURNING id)
        SELECT id, pg_notify('{OUTBOX_CHANNEL}', $1) FROM inserted
        """,
        project_id,
        name,
        payload,
        request_id,
        request_fingerprint,
        traceparent,
    )
    if row is not None:
        return int(row["id"]), True, None
    earlier = await db.fetchrow(
        "SELECT id, request_fingerprint FROM kb.trigger_outbox "
        "WHERE project_id = $1 AND request_id = $2",
        project_id,
        request_id,
    )
    return int(earlier["id"]), False, earlier["request_fingerprint"]


async def list_firings(
    db: Db,
    project_id: str,
    *,
    agent_name: str | None,
    outcome: str | None,
    after: tuple[dt.datetime, str] | None,
    limit: int,
) -> list[Firing]:
    """The project's firings newest first after the keyset position ``after``."""
    rows = await db.fetch(
        """
        SELECT * FROM kb.trigger_firings
        WHERE project_id = $1
          AND ($2::text IS NULL OR agent_name = $2)
          AND ($3::text IS NULL OR outcome = $3)
          AND ($4::timestamptz IS NULL OR (created_at, id) < ($4, $5::uuid))
        ORDER BY created_at DESC, id DESC
        LIMIT $6
        """,
        project_id,
        agent_name,
        outcome,
        after[0] if after else None,
        after[1] if after else None,
        limit,
    )
    return [Firing.from_row(r) for r in rows]


async def schedule_agent(
    conn: asyncpg.Connection, project_id: str, agent_name: str, schedule: str
) -> ListeningAgent | None:
    """The definition a schedule's tick starts, as a listener of ``schedule:<name>``."""
    row = await conn.fetchrow(
        """
        SELECT id, name, config, max_steps, default_timeout_s FROM kb.agent_definitions
        WHERE project_id = $1 AND name = $2
        """,
        project_id,
        agent_name,
    )
    if row is None:
        return None
    return ListeningAgent(
        id=str(row["id"]),
        name=row["name"],
        trigger=f"schedule:{schedule}",
        config=dict(row["config"] or {}),
        max_steps=row["max_steps"],
        default_timeout_s=row["default_timeout_s"],
    )
