"""The history repository: one method per statement, every one scoped by project_id.

Lists are keyset-paginated on the columns of an index (``agent_runs_*_created_idx``, the
``(run_id, seq)`` key of messages, ``agent_run_tool_calls_run_created_idx``); none uses
OFFSET. Each list method fetches ``limit`` rows, so callers pass ``page_size + 1`` to learn
whether another page follows.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import asyncpg

from agentfleet.events import ANSWERED_MODEL
from services.history.models import (
    AgentInfo,
    MessageRow,
    RunCounts,
    RunFilters,
    RunOverview,
    StatsRow,
    ToolCallOverview,
    ToolCallRow,
    TreeRow,
)

PREVIEW_CHARS = 200
TREE_LIMIT = 2000

_OVERVIEW_COLUMNS = f"""
    r.id, r.agent_name, r.status, r.parent_run_id, r.root_run_id, r.depth, r.total_steps,
    r.tokens_in, r.tokens_out, left(r.input, {PREVIEW_CHARS}) AS input_preview,
    length(r.input) > {PREVIEW_CHARS} AS input_truncated, r.created_at, r.completed_at,
    r.duration_ms, r.resume_count, r.task_id, r.labels, r.thread_id, r.cost_nanos,
    r.remote_agent, r.started_by, r.chain_depth
"""

# A run is an internal agent's if its project defines that agent name as internal.
NOT_INTERNAL_AGENT = """NOT EXISTS (
    SELECT 1 FROM kb.agent_definitions d
    WHERE d.project_id = r.project_id AND d.name = r.agent_name AND d.visibility = 'internal')"""


class HistoryQueries:
    """Read-only queries over runs, messages, tool calls and the agents of a project."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    @property
    def pool(self) -> asyncpg.Pool:
        """The pool the queries run on (for the statements of their own modules)."""
        return self._pool

    async def list_runs(
        self, filters: RunFilters, *, after: Sequence[Any] | None, limit: int
    ) -> list[RunOverview]:
        """Runs newest first (created_at, id DESC) after the keyset position ``after``.

        The WHERE clause is assembled from fixed fragments so each filter combination gets
        its own plan that can use its index; values are always parameters.
        """
        conditions = ["r.project_id = $1"]
        args: list[Any] = [filters.project_id]

        def param(value: Any, cast: str = "") -> str:
            args.append(value)
            return f"${len(args)}{cast}"

        if filters.agent_name:
            conditions.append(f"r.agent_name = {param(filters.agent_name)}")
        if filters.statuses:
            conditions.append(f"r.status = ANY({param(list(filters.statuses), '::text[]')})")
        if filters.parent_run_id:
            conditions.append(f"r.parent_run_id = {param(filters.parent_run_id, '::uuid')}")
        if filters.root_run_id:
            conditions.append(f"r.root_run_id = {param(filters.root_run_id, '::uuid')}")
        if filters.task_id:
            conditions.append(f"r.task_id = {param(filters.task_id, '::uuid')}")
        if filters.thread_id:
            conditions.append(
                f"r.thread_id = {param(filters.thread_id)} AND r.thread_id IS NOT NULL"
            )
        if filters.started_by:
            conditions.append(f"r.started_by = {param(filters.started_by)}")
        if filters.labels:
            # Containment on the project's runs (the other filters narrow them first).
            conditions.append(f"r.labels @> {param(dict(filters.labels), '::jsonb')}")
        if filters.top_level_only:
            conditions.append("r.parent_run_id IS NULL")
        if filters.created_after is not None:
            conditions.append(f"r.created_at >= {param(filters.created_after)}")
        if filters.created_before is not None:
            conditions.append(f"r.created_at < {param(filters.created_before)}")
        if not filters.include_internal_agents:
            conditions.append(NOT_INTERNAL_AGENT)
        if after is not None:
            created, run_id = after
            conditions.append(
                f"(r.created_at, r.id) < ({param(created, '::timestamptz')}, "
                f"{param(run_id, '::uuid')})"
            )
        sql = (
            f"SELECT {_OVERVIEW_COLUMNS} FROM kb.agent_runs r WHERE {' AND '.join(conditions)} "
            f"ORDER BY r.created_at DESC, r.id DESC LIMIT {param(limit, '::int')}"
        )
        rows = await self._pool.fetch(sql, *args)
        return [RunOverview.from_row(row) for row in rows]

    async def get_run(self, project_id: str, run_id: str) -> asyncpg.Record | None:
        """The full run row (AgentRun is built from it by agentfleet.events), with the model
        of its latest model message as ``answered_model``."""
        return await self._pool.fetchrow(
            f"SELECT r.*, {ANSWERED_MODEL} "
            "FROM kb.agent_runs r WHERE r.id = $1::uuid AND r.project_id = $2",
            run_id,
            project_id,
        )

    async def run_overview(self, project_id: str, run_id: str) -> RunOverview | None:
        """One run as lists show it (GetRun's parent)."""
        row = await self._pool.fetchrow(
            f"SELECT {_OVERVIEW_COLUMNS} FROM kb.agent_runs r "
            "WHERE r.id = $1::uuid AND r.project_id = $2",
            run_id,
            project_id,
        )
        return RunOverview.from_row(row) if row else None

    async def children(self, project_id: str, run_id: str, *, limit: int) -> list[RunOverview]:
        """Direct children, oldest first, internal agents' runs included."""
        rows = await self._pool.fetch(
            f"SELECT {_OVERVIEW_COLUMNS} FROM kb.agent_runs r "
            "WHERE r.parent_run_id = $1::uuid AND r.project_id = $2 "
            "ORDER BY r.created_at, r.id LIMIT $3",
            run_id,
            project_id,
            limit,
        )
        return [RunOverview.from_row(row) for row in rows]

    async def agent_info(self, project_id: str, agent_name: str) -> AgentInfo | None:
        """The agent's current definition; None once deleted."""
        row = await self._pool.fetchrow(
            """
            SELECT d.name, d.description, d.flow_type, d.visibility, d.tools, d.model,
                   p.name AS product_name
            FROM kb.agent_definitions d LEFT JOIN kb.products p ON p.id = d.product_id
            WHERE d.project_id = $1 AND d.name = $2
            """,
            project_id,
            agent_name,
        )
        return AgentInfo.from_row(row) if row else None

    async def run_counts(self, run_id: str) -> RunCounts:
        """Messages, tool calls and the last event seq of a run (already project-checked)."""
        row = await self._pool.fetchrow(
            """
            SELECT (SELECT count(*) FROM kb.agent_run_messages WHERE run_id = $1::uuid)
                       AS message_count,
                   (SELECT count(*) FROM kb.agent_run_tool_calls WHERE run_id = $1::uuid)
                       AS tool_call_count,
                   (SELECT coalesce(max(seq), 0) FROM kb.agent_run_events
                    WHERE run_id = $1::uuid) AS last_event_seq
            """,
            run_id,
        )
        return RunCounts.from_row(row)

    async def run_exists(self, project_id: str, run_id: str) -> bool:
        """Whether the run is in the project."""
        return bool(
            await self._pool.fetchval(
                "SELECT EXISTS (SELECT 1 FROM kb.agent_runs WHERE id = $1::uuid "
                "AND project_id = $2)",
                run_id,
                project_id,
            )
        )

    async def list_messages(
        self,
        project_id: str,
        run_id: str,
        *,
        roles: Sequence[str],
        include_internal: bool,
        after_seq: int | None,
        limit: int,
    ) -> list[MessageRow]:
        """Messages in seq order after ``after_seq``; ``roles`` empty = any."""
        rows = await self._pool.fetch(
            """
            SELECT m.id, m.run_id, m.seq, m.step_number, m.role, m.agent_name, m.content,
                   octet_length(m.content::text) AS size_bytes, m.tokens, m.is_internal,
                   m.created_at, m.model_name, m.cost_nanos
            FROM kb.agent_run_messages m JOIN kb.agent_runs r ON r.id = m.run_id
            WHERE m.run_id = $1::uuid AND r.project_id = $2 AND m.seq > $3
              AND (cardinality($4::text[]) = 0 OR m.role = ANY($4::text[]))
              AND ($5 OR NOT m.is_internal)
            ORDER BY m.seq LIMIT $6
            """,
            run_id,
            project_id,
            -1 if after_seq is None else after_seq,
            list(roles),
            include_internal,
            limit,
        )
        return [MessageRow.from_row(row) for row in rows]

    async def get_message(self, project_id: str, run_id: str, message_id: str) -> MessageRow | None:
        """One message of the run, full content."""
        row = await self._pool.fetchrow(
            """
            SELECT m.id, m.run_id, m.seq, m.step_number, m.role, m.agent_name, m.content,
                   octet_length(m.content::text) AS size_bytes, m.tokens, m.is_internal,
                   m.created_at, m.model_name, m.cost_nanos
            FROM kb.agent_run_messages m JOIN kb.agent_runs r ON r.id = m.run_id
            WHERE m.id = $1::uuid AND m.run_id = $2::uuid AND r.project_id = $3
            """,
            message_id,
            run_id,
            project_id,
        )
        return MessageRow.from_row(row) if row else None

    async def list_tool_calls(
        self,
        project_id: str,
        run_id: str,
        *,
        tool_name: str | None,
        statuses: Sequence[str],
        after: Sequence[Any] | None,
        limit: int,
        hidden_tools: Sequence[str] = (),
    ) -> list[ToolCallOverview]:
        """Tool calls in (created_at, id) order after the keyset position ``after``, without
        the calls of ``hidden_tools`` (internal ones, unless asked for)."""
        created, call_id = after if after is not None else (None, None)
        rows = await self._pool.fetch(
            f"""
            SELECT t.id, t.run_id, t.tool_call_id, t.step_number, t.tool_name, t.source,
                   t.status, t.duration_ms, left(t.error, {PREVIEW_CHARS}) AS error_preview,
                   octet_length(t.input::text) AS input_size_bytes,
                   coalesce(octet_length(t.output::text), 0) AS output_size_bytes,
                   t.child_run_ids, t.created_at
            FROM kb.agent_run_tool_calls t JOIN kb.agent_runs r ON r.id = t.run_id
            WHERE t.run_id = $1::uuid AND r.project_id = $2
              AND ($3::text IS NULL OR t.tool_name = $3)
              AND (cardinality($4::text[]) = 0 OR t.status = ANY($4::text[]))
              AND ($5::timestamptz IS NULL OR (t.created_at, t.id) > ($5, $6::uuid))
              AND t.tool_name <> ALL($8::text[])
            ORDER BY t.created_at, t.id LIMIT $7
            """,
            run_id,
            project_id,
            tool_name,
            list(statuses),
            created,
            call_id,
            limit,
            list(hidden_tools),
        )
        return [ToolCallOverview.from_row(row) for row in rows]

    async def get_tool_call(
        self, project_id: str, run_id: str, tool_call_id: str
    ) -> ToolCallRow | None:
        """One tool call by its tool_call_id within the run, input and output in full."""
        row = await self._pool.fetchrow(
            """
            SELECT t.id, t.run_id, t.message_id, t.tool_call_id, t.step_number, t.tool_name,
                   t.source, t.input, t.output, t.status, t.error, t.duration_ms,
                   t.child_run_ids, t.created_at, t.completed_at
            FROM kb.agent_run_tool_calls t JOIN kb.agent_runs r ON r.id = t.run_id
            WHERE t.run_id = $1::uuid AND t.tool_call_id = $2 AND r.project_id = $3
            """,
            run_id,
            tool_call_id,
            project_id,
        )
        return ToolCallRow.from_row(row) if row else None

    async def tree(self, project_id: str, run_id: str) -> list[TreeRow]:
        """Every run of the tree ``run_id`` belongs to (root first), at most TREE_LIMIT."""
        rows = await self._pool.fetch(
            f"""
            SELECT t.id, t.parent_run_id, t.agent_name, t.status, t.depth, t.step_count,
                   t.total_steps, t.tokens_in, t.tokens_out, t.tokens_total_tree,
                   t.cost_nanos, t.cost_total_tree_nanos, t.duration_ms,
                   left(CASE WHEN t.status = 'failed' THEN coalesce(t.error_message, t.summary)
                             ELSE t.summary END, {PREVIEW_CHARS}) AS summary_preview,
                   t.created_at, t.quota_wait, t.quota_wait_since, t.remote_agent,
                   t.started_by, t.trigger_origin, t.chain_depth
            FROM kb.agent_runs r
            JOIN kb.agent_runs t ON t.root_run_id = r.root_run_id AND t.project_id = r.project_id
            WHERE r.id = $1::uuid AND r.project_id = $2
            ORDER BY t.depth, t.created_at, t.id
            LIMIT $3
            """,
            run_id,
            project_id,
            TREE_LIMIT,
        )
        return [TreeRow.from_row(row) for row in rows]

    async def agent_stats(
        self,
        project_id: str,
        *,
        agent_name: str | None,
        start: datetime,
        end: datetime,
        include_internal_agents: bool,
    ) -> list[StatsRow]:
        """Per-agent statistics of the runs created in [start, end)."""
        rows = await self._pool.fetch(
            f"""
            SELECT r.agent_name,
                   count(*) AS total_runs,
                   count(*) FILTER (WHERE r.status = 'queued') AS queued,
                   count(*) FILTER (WHERE r.status = 'running') AS running,
                   count(*) FILTER (WHERE r.status = 'completed') AS completed,
                   count(*) FILTER (WHERE r.status = 'failed') AS failed,
                   count(*) FILTER (WHERE r.status = 'cancelled') AS cancelled,
                   count(*) FILTER (WHERE r.status = 'paused') AS paused,
                   percentile_cont(0.5) WITHIN GROUP (ORDER BY r.duration_ms) AS p50_ms,
                   percentile_cont(0.95) WITHIN GROUP (ORDER BY r.duration_ms) AS p95_ms,
                   coalesce(sum(r.tokens_in), 0)::bigint AS tokens_in,
                   coalesce(sum(r.tokens_out), 0)::bigint AS tokens_out,
                   coalesce(sum(r.cost_nanos), 0)::bigint AS cost_nanos,
                   coalesce(avg(r.total_steps), 0)::float8 AS mean_steps,
                   coalesce(sum(r.resume_count), 0)::bigint AS resumes,
                   count(*) FILTER (WHERE r.task_id IS NOT NULL AND EXISTS (
                       SELECT 1 FROM kb.agent_runs e
                       WHERE e.task_id = r.task_id AND e.project_id = r.project_id
                         AND (e.created_at, e.id) < (r.created_at, r.id))) AS task_retries
            FROM kb.agent_runs r
            WHERE r.project_id = $1 AND r.created_at >= $2 AND r.created_at < $3
              AND ($4::text IS NULL OR r.agent_name = $4)
              AND ($4::text IS NOT NULL OR $5 OR {NOT_INTERNAL_AGENT})
            GROUP BY r.agent_name
            ORDER BY r.agent_name
            """,
            project_id,
            start,
            end,
            agent_name,
            include_internal_agents,
        )
        return [StatsRow.from_row(row) for row in rows]
