"""ListTaskGraphs, CancelTaskGraph, RetryTask and ListTaskSessions on the database."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from agentfleet.errors import FailedPrecondition, NotFound
from agentfleet.graph import GraphObject, canonical_id, parse_id
from agentfleet.graph.task_properties import whole_number
from agentfleet.postgres.pagination import (
    clamp_page_size,
    decode_page_token,
    encode_page_token,
)
from services.dispatcher.graphs.graph_reads import GraphReader, GraphView
from services.dispatcher.models import GRAPH_STATUS, TaskView
from services.dispatcher.runs import RunControl
from services.dispatcher.store import reads, task_graphs
from services.dispatcher.store.common import notify_changes, notify_ready

__all__ = ["PageRequest", "cancel_graph", "list_graphs", "list_sessions", "retry_task"]


@dataclass(frozen=True, kw_only=True, slots=True)
class PageRequest:
    """The page a listing asks for: at most ``size`` rows (0: the default), after the last
    row of the page that issued ``token`` ("" for the first page)."""

    size: int
    token: str

    def start(
        self, filters: Mapping[str, Any], kinds: Sequence[type]
    ) -> tuple[int, tuple[Any, ...] | None]:
        """The clamped size and the keyset position (values of ``kinds``) to read after,
        None for the first page; INVALID_ARGUMENT for a negative size, a token of other
        ``filters`` or a position of other kinds."""
        after = decode_page_token(self.token, filters, kinds=kinds)
        return clamp_page_size(self.size), None if after is None else tuple(after)


async def list_graphs(
    reader: GraphReader,
    project_id: str,
    page_request: PageRequest,
    *,
    statuses: Sequence[str],
) -> tuple[list[GraphView], str]:
    """Newest first (keyset on created_at, id); a status filter applies to the derived
    status, which the database keeps per graph, so a page reads about its own size in rows
    however many graphs the project has (no filter: every status)."""
    filters = {"project_id": project_id, "statuses": sorted(statuses)}
    size, after = page_request.start(filters, (datetime, uuid.UUID))
    page = await reader.page(
        project_id,
        statuses or list(GRAPH_STATUS),
        after or reads.LAST_GRAPH,
        size + 1,
    )
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
    graph_id = canonical_id(graph_id, "task_graph_id")  # its tasks match it as text
    async with pool.acquire() as conn, conn.transaction():
        if not await task_graphs.cancel_graph(conn, project_id, graph_id, reason):
            raise NotFound(f"task graph {graph_id} not found in project {project_id}")
        await task_graphs.cancel_pending_tasks(conn, project_id, graph_id)
        await notify_changes(conn, [graph_id])
    for run_id in await reads.running_runs(pool, project_id, graph_id):
        await runs.cancel(project_id, run_id, reason)


async def retry_task(pool: asyncpg.Pool, project_id: str, task_id: str, feedback: str) -> TaskView:
    """FAILED, PAUSED or CANCELLED -> PENDING for one more attempt (beyond max_retries).

    Returns the task as the retry left it, read before commit: a dispatcher may claim it
    the moment the retry commits, and the answer must describe this call's own change."""
    parse_id(task_id, "task_id")
    async with pool.acquire() as conn, conn.transaction():
        task = await task_graphs.retry_subject(conn, project_id, uuid.UUID(task_id))
        if task is None:
            raise NotFound(f"task {task_id} not found in project {project_id}")
        if not task.graph_found:
            raise FailedPrecondition(
                f"task {task_id}: its graph_id is not a task graph of project {project_id}"
            )
        if task.graph_status == "cancelled":
            raise FailedPrecondition(f"task {task_id}: its task graph is cancelled")
        if task.status not in ("failed", "paused", "cancelled"):
            raise FailedPrecondition(
                f"task {task_id} is {task.status}; only a failed, paused or cancelled task "
                "can be retried"
            )
        await task_graphs.reset_for_retry(conn, project_id, uuid.UUID(task_id), feedback or None)
        await notify_ready(conn, project_id)
        # A found graph means graph_id names it.
        graph_id = str(task.graph_id)
        await notify_changes(conn, [graph_id])
        (view,) = [
            t
            for t in await reads.graph_tasks(conn, project_id, graph_id)
            if t.object.id == str(uuid.UUID(task_id))
        ]
    return view


async def list_sessions(
    pool: asyncpg.Pool, project_id: str, task_id: str, page_request: PageRequest
) -> tuple[list[GraphObject], str]:
    """The task's sessions by attempt (keyset on attempt, id)."""
    task = parse_id(task_id, "task_id")
    filters = {"project_id": project_id, "task_id": str(task)}
    size, after = page_request.start(filters, (int, uuid.UUID))
    if not await reads.task_exists(pool, project_id, task):
        raise NotFound(f"task {task_id} not found in project {project_id}")
    objects = await reads.session_page(
        pool, project_id, task, after or reads.FIRST_SESSION, size + 1
    )
    token = ""
    if len(objects) > size:
        objects = objects[:size]
        last = objects[-1]
        token = encode_page_token([_count(last.properties.get("attempt")), last.id], filters)
    return objects, token


def _count(value: object) -> int:
    return whole_number(value, 0, 2**31 - 1) or 0
