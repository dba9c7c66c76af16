"""ListTaskGraphs, CancelTaskGraph, RetryTask and ListTaskSessions on the database."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from agentfleet.errors import FailedPrecondition, NotFound
from agentfleet.graph import SPEC_TASK, GraphObject, parse_id
from agentfleet.graph.task_properties import sql_int, sql_uuid, whole_number
from agentfleet.pagination import clamp_page_size, decode_page_token, encode_page_token
from services.dispatcher.graph_reads import GraphReader, GraphView
from services.dispatcher.models import HAS_SESSION, TASK_GRAPH, TaskView, iso_now
from services.dispatcher.queries import (
    T_COLUMNS,
    UNFINISHED_BLOCKER,
    graph_tasks,
    notify_changes,
    notify_ready,
)
from services.dispatcher.runs import RunControl

__all__ = ["PageRequest", "cancel_graph", "list_graphs", "list_sessions", "retry_task"]

_SCAN_BATCH = 200
_ATTEMPT = "coalesce({}, 0)".format(sql_int("t.properties -> 'attempt'", 0, 2**31 - 1))
"""A session's attempt number (0 when a stored value is malformed: never a failed read)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PageRequest:
    """The page a listing asks for: at most ``size`` rows (0: the default), after the last
    row of the page that issued ``token`` ("" for the first page)."""

    size: int
    token: str

    def start(self, filters: Mapping[str, Any]) -> tuple[int, list[Any] | None]:
        """The clamped size and the (two-value) keyset position to read after, None for the
        first page; INVALID_ARGUMENT for a negative size or a token of other ``filters``."""
        return clamp_page_size(self.size), decode_page_token(self.token, filters, arity=2)


async def list_graphs(
    reader: GraphReader,
    pool: asyncpg.Pool,
    project_id: str,
    page_request: PageRequest,
    *,
    statuses: Sequence[str],
) -> tuple[list[GraphView], str]:
    """Newest first; a status filter applies to the derived status, so pages are filled
    from batches of graphs (keyset on created_at, id)."""
    filters = {"project_id": project_id, "statuses": sorted(statuses)}
    size, after = page_request.start(filters)
    page: list[GraphView] = []
    cursor = (after[0], uuid.UUID(after[1])) if after else None
    while len(page) <= size:
        rows = await pool.fetch(
            f"""
            SELECT {T_COLUMNS} FROM kb.graph_objects t
            WHERE t.project_id = $1 AND t.type = '{TASK_GRAPH}'
              AND ($2::timestamptz IS NULL OR (t.created_at, t.id) < ($2, $3::uuid))
            ORDER BY t.created_at DESC, t.id DESC LIMIT $4
            """,
            project_id,
            cursor[0] if cursor else None,
            cursor[1] if cursor else None,
            _SCAN_BATCH,
        )
        if not rows:
            break
        graphs = [GraphObject.from_row(r) for r in rows]
        for view in await reader.views(project_id, graphs):
            if not statuses or view.status in statuses:
                page.append(view)
        last = graphs[-1]
        cursor = (last.created_at, uuid.UUID(last.id))
        if len(rows) < _SCAN_BATCH:
            break
    token = ""
    if len(page) > size:
        page = page[:size]
        last_obj = page[-1].object
        token = encode_page_token([last_obj.created_at, last_obj.id], filters)
    return page, token


async def cancel_graph(
    pool: asyncpg.Pool, runs: RunControl, project_id: str, graph_id: str, reason: str
) -> None:
    """Pending tasks end CANCELLED at once; in-flight runs are cancelled (their tasks end
    CANCELLED when the dispatcher following them sees the run end). Idempotent."""
    parse_id(graph_id, "task_graph_id")
    async with pool.acquire() as conn, conn.transaction():
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
        if updated is None:
            raise NotFound(f"task graph {graph_id} not found in project {project_id}")
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
        await notify_changes(conn, [graph_id])
    rows = await pool.fetch(
        f"""
        SELECT s.properties ->> 'run_id' AS run_id
        FROM kb.graph_objects t
        JOIN kb.graph_objects s
          ON s.project_id = t.project_id AND s.id = {sql_uuid("t.properties ->> 'session_id'")}
        WHERE t.project_id = $1 AND t.type = '{SPEC_TASK}' AND t.status = 'in_progress'
          AND t.properties ->> 'graph_id' = $2 AND s.properties ? 'run_id'
        """,
        project_id,
        graph_id,
    )
    for row in rows:
        await runs.cancel(project_id, row["run_id"], reason)


async def retry_task(pool: asyncpg.Pool, project_id: str, task_id: str, feedback: str) -> TaskView:
    """FAILED, PAUSED or CANCELLED -> PENDING for one more attempt (beyond max_retries).

    Returns the task as the retry left it, read before commit: a dispatcher may claim it
    the moment the retry commits, and the answer must describe this call's own change."""
    parse_id(task_id, "task_id")
    async with pool.acquire() as conn, conn.transaction():
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
            uuid.UUID(task_id),
        )
        if row is None:
            raise NotFound(f"task {task_id} not found in project {project_id}")
        if not row["graph_found"]:
            raise FailedPrecondition(
                f"task {task_id}: its graph_id is not a task graph of project {project_id}"
            )
        if row["graph_status"] == "cancelled":
            raise FailedPrecondition(f"task {task_id}: its task graph is cancelled")
        if row["status"] not in ("failed", "paused", "cancelled"):
            raise FailedPrecondition(
                f"task {task_id} is {row['status']}; only a failed, paused or cancelled task "
                "can be retried"
            )
        await conn.execute(
            f"""
            UPDATE kb.graph_objects t
            SET properties = (t.properties - 'complete_time' - 'not_before')
                  || jsonb_build_object('status', 'pending', 'ready', NOT {UNFINISHED_BLOCKER},
                                        'feedback', $3::text),
                version = t.version + 1, updated_at = now()
            WHERE t.project_id = $1 AND t.id = $2
            """,
            project_id,
            uuid.UUID(task_id),
            feedback or None,
        )
        await notify_ready(conn, project_id)
        await notify_changes(conn, [row["graph_id"]])
        (view,) = [
            t
            for t in await graph_tasks(conn, project_id, row["graph_id"])
            if t.object.id == str(uuid.UUID(task_id))
        ]
    return view


async def list_sessions(
    pool: asyncpg.Pool, project_id: str, task_id: str, page_request: PageRequest
) -> tuple[list[GraphObject], str]:
    """The task's sessions by attempt (keyset on attempt, id)."""
    task = parse_id(task_id, "task_id")
    filters = {"project_id": project_id, "task_id": str(task)}
    size, after = page_request.start(filters)
    exists = await pool.fetchval(
        f"SELECT 1 FROM kb.graph_objects WHERE project_id = $1 AND id = $2 "
        f"AND type = '{SPEC_TASK}'",
        project_id,
        task,
    )
    if exists is None:
        raise NotFound(f"task {task_id} not found in project {project_id}")
    rows = await pool.fetch(
        f"""
        SELECT {T_COLUMNS} FROM kb.graph_relationships r
        JOIN kb.graph_objects t ON t.id = r.dst_id
        WHERE r.project_id = $1 AND r.src_id = $2 AND r.type = '{HAS_SESSION}'
          AND ($3::int IS NULL OR ({_ATTEMPT}, t.id) > ($3, $4::uuid))
        ORDER BY {_ATTEMPT}, t.id
        LIMIT $5
        """,
        project_id,
        task,
        after[0] if after else None,
        uuid.UUID(after[1]) if after else None,
        size + 1,
    )
    objects = [GraphObject.from_row(r) for r in rows]
    token = ""
    if len(objects) > size:
        objects = objects[:size]
        last = objects[-1]
        token = encode_page_token([_count(last.properties.get("attempt")), last.id], filters)
    return objects, token


def _count(value: object) -> int:
    return whole_number(value, 0, 2**31 - 1) or 0
