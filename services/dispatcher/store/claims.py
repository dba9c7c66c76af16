"""Claiming SpecTasks (DESIGN §9 "Loop"): several dispatchers share the work through
``FOR UPDATE SKIP LOCKED`` and conditional updates, and hold each claimed task with a lease
(``lease_owner`` / ``lease_expires``, epoch seconds of the database clock, in the task's
properties) that they renew; a task whose lease expired is adopted by another dispatcher.

Availability is ``pending`` + ``ready`` (a hint kept by whoever changes a blocker, served by
a partial index) re-checked against the blockers in the claim itself, so a stale hint can
never dispatch a blocked task, and a retry's ``not_before`` (backoff) has passed. The claim
shares the free slots fairly between projects, and a graph at its max_parallel never holds
back other tasks (the SQL and why: :mod:`.claim_sql`).

One claim statement serves every project, so no stored value may make it raise: every
property it reads goes through the guarded casts of ``agentfleet.graph.task_properties``.
A claimed task whose graph_id, max_retries, timeout_s or assigned_agent is malformed, or
whose graph is not a task graph of its own project, ends ``failed`` in that same statement
with an error naming the property; a malformed priority is reset to the default by
:func:`classify_new` and skipped by the claim until then.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg
import structlog

from agentfleet.graph import SPEC_TASK, GraphObject
from agentfleet.graph.task_properties import is_uuid, sql_number, sql_uuid, task_problem_sql
from services.dispatcher.models import TASK_GRAPH, iso_now
from services.dispatcher.prompt import BlockerResult
from services.dispatcher.store.claim_sql import (
    AVAILABLE,
    BAD_PRIORITY,
    BLOCKERS,
    CL_COLUMNS,
    CLAIM,
    CLAIM_SET,
    MAX_PARALLEL,
    unless_malformed,
)
from services.dispatcher.store.common import T_COLUMNS, UNFINISHED_BLOCKER, notify_changes

__all__ = ["Claimed", "adopt_expired", "claim_available", "classify_new", "release", "renew"]

log = structlog.get_logger(__name__)

_LEASE_EXPIRES = sql_number("properties -> 'lease_expires'", 0, 1e12)


@dataclass(frozen=True, kw_only=True, slots=True)
class Claimed:
    """A task this dispatcher now holds, with the session its attempt will use."""

    task: GraphObject
    session_id: str
    blockers: list[BlockerResult]
    """Its completed blockers (read in the claim: the prompt needs them)."""


async def classify_new(conn: asyncpg.Connection | asyncpg.Pool) -> int:
    """Gives tasks written without a ``ready`` hint (``create_subtasks``) one, and resets an
    available task's malformed priority (not a number from -1000 to 1000) to the default 0,
    keeping the stored value as ``malformed_priority``. Returns how many tasks it changed."""
    row = await conn.fetchrow(
        f"""
        WITH classified AS (
            UPDATE kb.graph_objects t
            SET properties = t.properties || jsonb_build_object(
                    'ready', NOT {UNFINISHED_BLOCKER}, 'attempts', 0),
                version = t.version + 1, updated_at = now()
            WHERE t.type = '{SPEC_TASK}' AND t.status = 'pending' AND NOT (t.properties ? 'ready')
              AND t.properties ? 'graph_id'
            RETURNING 1
        ), normalised AS (
            UPDATE kb.graph_objects t
            SET properties = t.properties || jsonb_build_object(
                    'priority', 0, 'malformed_priority', t.properties -> 'priority'),
                version = t.version + 1, updated_at = now()
            WHERE t.type = '{SPEC_TASK}' AND t.status = 'pending'
              AND (t.properties ->> 'ready') = 'true' AND {BAD_PRIORITY}
            RETURNING 1
        )
        SELECT (SELECT count(*) FROM classified) + (SELECT count(*) FROM normalised) AS n
        """
    )
    assert row is not None  # the statement always returns its one row
    return int(row["n"])


async def claim_available(
    conn: asyncpg.Connection, *, owner: str, lease_s: float, limit: int
) -> list[Claimed]:
    """Claims up to ``limit`` available tasks, honouring each graph's max_parallel."""
    if limit <= 0:
        return []
    rows = await conn.fetch(CLAIM, limit, owner, lease_s, iso_now())
    claimed = _started([row for row in rows if row["id"] is not None])
    limited = rows[0]["limited_ids"] if rows else None
    if limited and limit > len(claimed):
        claimed += await _claim_limited(
            conn, limited, owner=owner, lease_s=lease_s, limit=limit - len(claimed)
        )
    return claimed


def _started(rows: Sequence[asyncpg.Record]) -> list[Claimed]:
    """The claimed rows to start (not those the claim ended failed)."""
    return [_claimed(row) for row in rows if _still_in_progress(row)]


def _still_in_progress(row: asyncpg.Record) -> bool:
    """False (and logged) for a task the statement ended failed as malformed."""
    if row["status"] == "in_progress":
        return True
    log.warning(
        "malformed task failed",
        task=str(row["id"]),
        project=row["project_id"],
        error=row["properties"].get("error_message"),
    )
    return False


def _claimed(row: asyncpg.Record) -> Claimed:
    task = GraphObject.from_row(row)
    return Claimed(
        task=task,
        session_id=str(task.properties["session_id"]),
        blockers=[BlockerResult(**b) for b in row["blockers"]],
    )


async def _claim_limited(
    conn: asyncpg.Connection,
    task_ids: Sequence[uuid.UUID],
    *,
    owner: str,
    lease_s: float,
    limit: int,
) -> list[Claimed]:
    """Claims candidates of graphs with a max_parallel, re-checked under the graphs' locks."""
    async with conn.transaction():
        rows = await conn.fetch(
            f"""
            SELECT t.id, t.project_id, t.properties ->> 'graph_id' AS graph_id
            FROM kb.graph_objects t
            WHERE {AVAILABLE} AND t.id = ANY($2::uuid[])
            ORDER BY array_position($2::uuid[], t.id)
            LIMIT $1
            FOR UPDATE OF t SKIP LOCKED
            """,
            limit,
            list(task_ids),
        )
        if not rows:
            return []
        allowed = await _within_graph_limits(conn, rows)
        if not allowed:
            return []
        updated = await conn.fetch(
            f"""
            WITH claimed AS (
                UPDATE kb.graph_objects t {CLAIM_SET}
                WHERE t.id = ANY($1::uuid[]) AND t.status = 'pending'
                RETURNING {T_COLUMNS}
            )
            SELECT {CL_COLUMNS}, {BLOCKERS} FROM claimed cl
            """,
            allowed,
            owner,
            lease_s,
            iso_now(),
        )
        claimed = _started(updated)
        await notify_changes(conn, [str(c.task.properties["graph_id"]) for c in claimed])
    return claimed


async def _within_graph_limits(
    conn: asyncpg.Connection, rows: Sequence[asyncpg.Record]
) -> list[uuid.UUID]:
    """The candidates their graphs' max_parallel admits. Limited graphs are locked (SKIP
    LOCKED: a graph being changed or claimed by another dispatcher waits for the next round)."""
    # A graph id changed to garbage since the candidates were read waits for the next
    # round, where the claim statement fails its task.
    rows = [row for row in rows if is_uuid(row["graph_id"])]
    graph_ids = sorted({row["graph_id"] for row in rows})
    graphs = await conn.fetch(
        f"""
        SELECT g.id::text AS id, {MAX_PARALLEL} AS max_parallel
        FROM kb.graph_objects g
        WHERE g.id = ANY($1::uuid[]) AND g.type = '{TASK_GRAPH}' AND {MAX_PARALLEL} > 0
        ORDER BY g.id
        FOR UPDATE SKIP LOCKED
        """,
        graph_ids,
    )
    limited = {g["id"]: g["max_parallel"] for g in graphs}
    skipped = await conn.fetch(
        f"""
        SELECT g.id::text AS id FROM kb.graph_objects g
        WHERE g.id = ANY($1::uuid[]) AND g.type = '{TASK_GRAPH}'
          AND {MAX_PARALLEL} > 0 AND NOT (g.id = ANY($2::uuid[]))
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


# MATERIALIZED: locked once, exactly LIMIT rows (an IN (subquery) may be re-planned as a
# join that runs the locking subquery again), as the executor's run claim does.
# An adopted task is started again from its stored session: one whose session_id (or any
# property the claim checks) is malformed ends failed instead ($4: now).
_ADOPT_PROBLEM = f"""CASE WHEN {sql_uuid("t.properties ->> 'session_id'")} IS NULL
    THEN 'session_id: ' || coalesce(t.properties ->> 'session_id', 'missing') || ' is not an id'
    ELSE {task_problem_sql("t", TASK_GRAPH)} END"""
_ADOPTING = """jsonb_build_object(
    'lease_owner', $1::text, 'lease_expires', extract(epoch FROM now()) + $2::float8)"""
_ADOPT = f"""
        WITH expired AS MATERIALIZED (
            SELECT id FROM kb.graph_objects
            WHERE type = '{SPEC_TASK}' AND status = 'in_progress'
              AND coalesce({_LEASE_EXPIRES}, 0) < extract(epoch FROM now())
            ORDER BY id LIMIT $3
            FOR UPDATE SKIP LOCKED
        )
        UPDATE kb.graph_objects t
        SET properties = (t.properties - 'lease_owner' - 'lease_expires')
              || {unless_malformed(_ADOPT_PROBLEM, _ADOPTING)},
            version = t.version + 1, updated_at = now()
        FROM expired
        WHERE t.id = expired.id AND t.status = 'in_progress'
        RETURNING {T_COLUMNS}
        """


async def adopt_expired(
    conn: asyncpg.Connection | asyncpg.Pool, *, owner: str, lease_s: float, limit: int
) -> list[GraphObject]:
    """Takes over in-progress tasks whose dispatcher stopped renewing their lease."""
    if limit <= 0:
        return []
    rows = await conn.fetch(_ADOPT, owner, lease_s, limit, iso_now())
    return [GraphObject.from_row(row) for row in rows if _still_in_progress(row)]


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
