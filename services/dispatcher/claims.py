"""Claiming SpecTasks (DESIGN §9 "Loop"): several dispatchers share the work through
``FOR UPDATE SKIP LOCKED`` and conditional updates, and hold each claimed task with a lease
(``lease_owner`` / ``lease_expires``, epoch seconds of the database clock, in the task's
properties) that they renew; a task whose lease expired is adopted by another dispatcher.

Availability is ``pending`` + ``ready`` (a hint kept by whoever changes a blocker, served by
a partial index) re-checked against the blockers in the claim itself, so a stale hint can
never dispatch a blocked task.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg

from agentfleet.graph import SPEC_TASK, GraphObject
from services.dispatcher.models import TASK_GRAPH, iso_now
from services.dispatcher.queries import T_COLUMNS, UNFINISHED_BLOCKER, notify_changes

__all__ = ["Claimed", "adopt_expired", "claim_available", "classify_new", "release", "renew"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Claimed:
    """A task this dispatcher now holds, with the session its attempt will use."""

    task: GraphObject
    session_id: str


async def classify_new(pool: asyncpg.Pool) -> int:
    """Gives tasks written without a ``ready`` hint (``create_subtasks``) one."""
    result = await pool.execute(
        f"""
        UPDATE kb.graph_objects t
        SET properties = t.properties || jsonb_build_object('ready', NOT {UNFINISHED_BLOCKER},
                                                            'attempts', 0),
            version = t.version + 1, updated_at = now()
        WHERE t.type = '{SPEC_TASK}' AND t.status = 'pending' AND NOT (t.properties ? 'ready')
          AND t.properties ? 'graph_id'
        """
    )
    return int(result.split()[-1])


async def claim_available(
    pool: asyncpg.Pool, *, owner: str, lease_s: float, limit: int
) -> list[Claimed]:
    """Claims up to ``limit`` available tasks, honouring each graph's max_parallel."""
    if limit <= 0:
        return []
    async with pool.acquire() as conn, conn.transaction():
        rows = await conn.fetch(
            f"""
            SELECT t.id, t.properties ->> 'graph_id' AS graph_id FROM kb.graph_objects t
            WHERE t.type = '{SPEC_TASK}' AND t.status = 'pending'
              AND (t.properties ->> 'ready') = 'true' AND NOT {UNFINISHED_BLOCKER}
            ORDER BY (t.properties -> 'priority') DESC NULLS LAST, t.created_at, t.id
            LIMIT $1
            FOR UPDATE OF t SKIP LOCKED
            """,
            limit,
        )
        if not rows:
            return []
        allowed = await _within_graph_limits(conn, rows)
        if not allowed:
            return []
        session_ids = [str(uuid.uuid4()) for _ in allowed]
        updated = await conn.fetch(
            f"""
            UPDATE kb.graph_objects t
            SET properties = t.properties || jsonb_build_object(
                    'status', 'in_progress', 'ready', false, 'lease_owner', $2::text,
                    'lease_expires', extract(epoch FROM now()) + $3::float8,
                    'session_id', c.sid, 'previous_session_id', t.properties -> 'session_id',
                    'attempts', coalesce((t.properties ->> 'attempts')::int, 0) + 1,
                    'start_time', coalesce(t.properties ->> 'start_time', $5::text)),
                version = t.version + 1, updated_at = now()
            FROM unnest($1::uuid[], $4::text[]) AS c (id, sid)
            WHERE t.id = c.id AND t.status = 'pending'
            RETURNING {T_COLUMNS}
            """,
            allowed,
            owner,
            lease_s,
            session_ids,
            iso_now(),
        )
        claimed = [GraphObject.from_row(row) for row in updated]
        await notify_changes(conn, [str(c.properties["graph_id"]) for c in claimed])
    return [Claimed(task=t, session_id=str(t.properties["session_id"])) for t in claimed]


async def _within_graph_limits(
    conn: asyncpg.Connection, rows: Sequence[asyncpg.Record]
) -> list[uuid.UUID]:
    """The candidates their graphs' max_parallel admits. Limited graphs are locked (SKIP
    LOCKED: a graph being changed or claimed by another dispatcher waits for the next round)."""
    graph_ids = sorted({row["graph_id"] for row in rows})
    graphs = await conn.fetch(
        f"""
        SELECT id::text AS id, coalesce((properties ->> 'max_parallel')::int, 0) AS max_parallel
        FROM kb.graph_objects
        WHERE id = ANY($1::uuid[]) AND type = '{TASK_GRAPH}'
          AND coalesce((properties ->> 'max_parallel')::int, 0) > 0
        ORDER BY id
        FOR UPDATE SKIP LOCKED
        """,
        graph_ids,
    )
    limited = {g["id"]: g["max_parallel"] for g in graphs}
    skipped = await conn.fetch(
        f"""
        SELECT id::text AS id FROM kb.graph_objects
        WHERE id = ANY($1::uuid[]) AND type = '{TASK_GRAPH}'
          AND coalesce((properties ->> 'max_parallel')::int, 0) > 0 AND NOT (id = ANY($2::uuid[]))
        """,
        graph_ids,
        list(limited),
    )
    blocked_graphs = {g["id"] for g in skipped}
    running: dict[str, int] = {}
    if limited:
        for row in await conn.fetch(
            f"""
            SELECT properties ->> 'graph_id' AS graph_id, count(*) AS n FROM kb.graph_objects
            WHERE type = '{SPEC_TASK}' AND status = 'in_progress'
              AND properties ->> 'graph_id' = ANY($1::text[])
            GROUP BY 1
            """,
            list(limited),
        ):
            running[row["graph_id"]] = row["n"]
    allowed: list[uuid.UUID] = []
    for row in rows:
        graph_id = row["graph_id"]
        if graph_id in blocked_graphs:
            continue
        if graph_id in limited:
            if running.get(graph_id, 0) >= limited[graph_id]:
                continue
            running[graph_id] = running.get(graph_id, 0) + 1
        allowed.append(row["id"])
    return allowed


async def adopt_expired(
    pool: asyncpg.Pool, *, owner: str, lease_s: float, limit: int
) -> list[GraphObject]:
    """Takes over in-progress tasks whose dispatcher stopped renewing their lease."""
    if limit <= 0:
        return []
    rows = await pool.fetch(
        f"""
        UPDATE kb.graph_objects t
        SET properties = t.properties || jsonb_build_object(
                'lease_owner', $1::text, 'lease_expires', extract(epoch FROM now()) + $2::float8),
            version = t.version + 1, updated_at = now()
        WHERE t.id IN (
            SELECT id FROM kb.graph_objects
            WHERE type = '{SPEC_TASK}' AND status = 'in_progress'
              AND (properties ->> 'lease_expires')::float8 < extract(epoch FROM now())
            ORDER BY id LIMIT $3
            FOR UPDATE SKIP LOCKED)
          AND t.status = 'in_progress'
        RETURNING {T_COLUMNS}
        """,
        owner,
        lease_s,
        limit,
    )
    return [GraphObject.from_row(row) for row in rows]


async def renew(pool: asyncpg.Pool, *, owner: str, lease_s: float, task_ids: Sequence[str]) -> int:
    """Extends this dispatcher's leases; returns how many it still holds."""
    if not task_ids:
        return 0
    result = await pool.execute(
        """
        UPDATE kb.graph_objects
        SET properties = properties || jsonb_build_object(
                'lease_expires', extract(epoch FROM now()) + $2::float8)
        WHERE id = ANY($3::uuid[]) AND status = 'in_progress'
          AND properties ->> 'lease_owner' = $1
        """,
        owner,
        lease_s,
        [uuid.UUID(t) for t in task_ids],
    )
    return int(result.split()[-1])


async def release(pool: asyncpg.Pool, *, owner: str, task_ids: Sequence[str]) -> None:
    """Lets another dispatcher adopt these tasks at once (a clean shutdown)."""
    if task_ids:
        await pool.execute(
            """
            UPDATE kb.graph_objects SET properties = properties || '{"lease_expires": 0}'
            WHERE id = ANY($2::uuid[]) AND status = 'in_progress'
              AND properties ->> 'lease_owner' = $1
            """,
            owner,
            [uuid.UUID(t) for t in task_ids],
        )
