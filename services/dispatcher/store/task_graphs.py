"""Writes of task graphs the dispatcher's API makes beyond creating objects and edges (which
go through the graph library): the request-id lookups that make CreateTaskGraph and AddTasks
idempotent, the pending tasks a new edge blocks (locked here; the graph library's
mark_not_ready, shared with create_subtasks, clears their hint), CancelTaskGraph and
RetryTask. Callers own the transactions (and the project's DAG lock); every statement is
scoped by project_id."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg

from agentfleet.graph import SPEC_TASK, TASK_GRAPH_ADDITION
from agentfleet.graph.task_properties import sql_uuid
from services.dispatcher.models import TASK_GRAPH, iso_now
from services.dispatcher.store.common import UNFINISHED_BLOCKER

__all__ = [
    "EarlierAddition",
    "EarlierGraph",
    "RetrySubject",
    "addition_of_request",
    "cancel_graph",
    "cancel_pending_tasks",
    "graph_of_request",
    "lock_task_states",
    "reset_for_retry",
    "retry_subject",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class EarlierGraph:
    """The graph an earlier CreateTaskGraph of a request_id made."""

    graph_id: str
    request_fingerprint: str | None
    """What that request asked; None for a graph made before fingerprints were kept."""


@dataclass(frozen=True, kw_only=True, slots=True)
class EarlierAddition:
    """What an earlier AddTasks of a request_id added."""

    task_ids: list[str]
    request_fingerprint: str | None
    """What that request asked; None for an addition made before fingerprints were kept."""


async def graph_of_request(
    conn: asyncpg.Connection | asyncpg.Pool, project_id: str, request_id: str
) -> EarlierGraph | None:
    """The graph an earlier CreateTaskGraph of ``request_id`` (the graph's key) made."""
    row = await _request_object(conn, project_id, TASK_GRAPH, request_id)
    if row is None:
        return None
    return EarlierGraph(graph_id=str(row["id"]), request_fingerprint=row["fingerprint"])


async def addition_of_request(
    conn: asyncpg.Connection, project_id: str, marker_key: str
) -> EarlierAddition | None:
    """The task ids an earlier AddTasks recorded on its marker object, if there is one."""
    row = await _request_object(conn, project_id, TASK_GRAPH_ADDITION, marker_key)
    if row is None:
        return None
    return EarlierAddition(task_ids=list(row["task_ids"]), request_fingerprint=row["fingerprint"])


async def _request_object(
    conn: asyncpg.Connection | asyncpg.Pool, project_id: str, object_type: str, key: str
) -> asyncpg.Record | None:
    """The object whose key is a request's (a graph, an addition marker): its id, the task
    ids an addition recorded, and the fingerprint of the request that made it."""
    return await conn.fetchrow(
        "SELECT id, properties -> 'task_ids' AS task_ids, "
        "properties ->> 'request_fingerprint' AS fingerprint FROM kb.graph_objects "
        "WHERE project_id = $1 AND type = $2 AND key = $3",
        project_id,
        object_type,
        key,
    )


async def lock_task_states(
    conn: asyncpg.Connection, project_id: str, task_ids: Sequence[str]
) -> list[tuple[str, str]]:
    """Locks the tasks (in id order) and returns each one's (key, status)."""
    rows = await conn.fetch(
        "SELECT id, status, properties ->> 'key' AS key FROM kb.graph_objects "
        "WHERE project_id = $1 AND id = ANY($2::uuid[]) ORDER BY id FOR UPDATE",
        project_id,
        [uuid.UUID(t) for t in task_ids],
    )
    return [(row["key"], row["status"]) for row in rows]


async def cancel_graph(
    conn: asyncpg.Connection, project_id: str, graph_id: str, reason: str
) -> bool:
    """Marks the graph cancelled (the first cancel_time stays); False if there is none."""
    updated = await conn.fetchval(
        f"""
        UPDATE kb.graph_objects
        SET properties = properties || jsonb_build_object(
                'status', 'cancelled', 'cancel_reason', $3::text, 'cancel_time',
                coalesce(properties ->> 'cancel_time', $4::text)),
            version = version + 1, updated_at = now()
        WHERE project_id = $1 AND id = $2 AND type = '{TASK_GRAPH}'
        RETURNING id
        """,
        project_id,
        uuid.UUID(graph_id),
        reason,
        iso_now(),
    )
    return updated is not None


async def cancel_pending_tasks(conn: asyncpg.Connection, project_id: str, graph_id: str) -> None:
    """Ends the graph's pending tasks CANCELLED."""
    await conn.execute(
        f"""
        UPDATE kb.graph_objects
        SET properties = properties || jsonb_build_object(
                'status', 'cancelled', 'ready', false, 'complete_time', $3::text),
            version = version + 1, updated_at = now()
        WHERE project_id = $1 AND type = '{SPEC_TASK}' AND status = 'pending'
          AND properties ->> 'graph_id' = $2
        """,
        project_id,
        graph_id,
        iso_now(),
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class RetrySubject:
    """A task RetryTask may reset, and its graph."""

    status: str
    graph_id: str | None
    graph_found: bool
    """Its graph_id names a task graph of its project."""
    graph_status: str | None


async def retry_subject(
    conn: asyncpg.Connection, project_id: str, task_id: uuid.UUID
) -> RetrySubject | None:
    """The task, locked until the transaction ends; None if the project has no such task."""
    row = await conn.fetchrow(
        f"""
        SELECT t.status, g.status AS graph_status, g.id IS NOT NULL AS graph_found,
               t.properties ->> 'graph_id' AS graph_id
        FROM kb.graph_objects t
        LEFT JOIN kb.graph_objects g ON g.project_id = t.project_id
          AND g.id = {sql_uuid("t.properties ->> 'graph_id'")} AND g.type = '{TASK_GRAPH}'
        WHERE t.project_id = $1 AND t.id = $2 AND t.type = '{SPEC_TASK}'
        FOR UPDATE OF t
        """,
        project_id,
        task_id,
    )
    if row is None:
        return None
    return RetrySubject(
        status=row["status"],
        graph_id=row["graph_id"],
        graph_found=row["graph_found"],
        graph_status=row["graph_status"],
    )


async def reset_for_retry(
    conn: asyncpg.Connection, project_id: str, task_id: uuid.UUID, feedback: str | None
) -> None:
    """Back to pending (ready unless a blocker is unfinished) with the retry's feedback."""
    await conn.execute(
        f"""
        UPDATE kb.graph_objects t
        SET properties = (t.properties - 'complete_time' - 'not_before' - 'escalated')
              || jsonb_build_object('status', 'pending', 'ready', NOT {UNFINISHED_BLOCKER},
                                    'feedback', $3::text),
            version = t.version + 1, updated_at = now()
        WHERE t.project_id = $1 AND t.id = $2
        """,
        project_id,
        task_id,
        feedback,
    )
