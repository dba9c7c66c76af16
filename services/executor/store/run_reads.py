"""Reads of ``kb.agent_runs`` over several runs: a run's tree, its thread, the runs a worker
holds, the creator of a task (:mod:`.runs` has one run's row and its transitions)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from agentfleet.graph import SPEC_TASK
from agentfleet.graph.task_properties import sql_uuid
from agentfleet.postgres.rows import from_row
from services.executor.runs import RunRecord

Db = asyncpg.Pool | asyncpg.Connection

# Descendants of a run that have not ended, parents before children. Walks
# agent_runs_parent_created_idx one level at a time; project-scoped at every level. Runs of
# tasks the run created (task_id set, see task_lineage) are its children only for their
# limits: the dispatcher owns them (CancelTaskGraph), so they are not cancelled with it.
_OPEN_DESCENDANTS = """
WITH RECURSIVE tree AS (
    SELECT id, status, 1 AS level FROM kb.agent_runs
    WHERE project_id = $1 AND parent_run_id = $2::uuid AND task_id IS NULL
    UNION ALL
    SELECT r.id, r.status, t.level + 1 FROM kb.agent_runs r
    JOIN tree t ON r.parent_run_id = t.id
    WHERE r.project_id = $1 AND r.task_id IS NULL
)
SELECT id FROM tree WHERE status = ANY($3::text[]) ORDER BY level, id
"""

_PREVIOUS_IN_THREAD = """
SELECT id FROM kb.agent_runs
WHERE project_id = $1 AND thread_id = $2 AND status = 'completed'
  AND (created_at, id) < ($3::timestamptz, $4::uuid)
ORDER BY created_at DESC, id DESC
LIMIT 1
"""

_TASK_CREATOR = f"""
    SELECT t.properties, t.properties ->> 'created_by_run_id' AS creator_id,
           c.id::text AS creator_run_id, c.root_run_id::text AS creator_root_id,
           c.depth AS creator_depth, c.max_steps AS creator_max_steps,
           c.max_tokens AS creator_max_tokens, d.max_steps AS creator_definition_max_steps
    FROM kb.graph_objects t
    LEFT JOIN kb.agent_runs c
      ON c.project_id = t.project_id AND c.id = {sql_uuid("t.properties ->> 'created_by_run_id'")}
    LEFT JOIN kb.agent_definitions d
      ON d.id = c.agent_definition_id AND d.project_id = c.project_id
    WHERE t.project_id = $1 AND t.id = $2 AND t.type = '{SPEC_TASK}'
    """


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskCreator:
    """A task and the run that created it (the run's columns None when it is not a run of
    the project)."""

    properties: Mapping[str, Any]
    creator_id: str | None
    """The task's created_by_run_id as written."""
    creator_run_id: str | None
    creator_root_id: str | None
    creator_depth: int | None
    creator_max_steps: int | None
    creator_max_tokens: int | None
    creator_definition_max_steps: int | None


async def many(db: Db, project_id: str, run_ids: Sequence[str]) -> list[RunRecord]:
    """The runs of ``run_ids`` in the project, in no particular order."""
    rows = await db.fetch(
        "SELECT * FROM kb.agent_runs WHERE project_id = $1 AND id = ANY($2::uuid[])",
        project_id,
        list(run_ids),
    )
    return [RunRecord.from_row(r) for r in rows]


async def ended(db: Db, run_ids: Sequence[str]) -> frozenset[str]:
    """Which of a worker's ``run_ids`` (any project) are no longer ``running``."""
    rows = await db.fetch(
        "SELECT id FROM kb.agent_runs WHERE id = ANY($1::uuid[]) AND status <> 'running'",
        list(run_ids),
    )
    return frozenset(str(r["id"]) for r in rows)


async def open_descendants(
    db: Db, project_id: str, run_id: str, statuses: Sequence[str]
) -> list[str]:
    """Ids of the run's descendants in ``statuses``, parents first."""
    rows = await db.fetch(_OPEN_DESCENDANTS, project_id, run_id, list(statuses))
    return [str(r["id"]) for r in rows]


async def count_in_tree(db: Db, project_id: str, root_run_id: str) -> int:
    """How many runs the tree of ``root_run_id`` holds."""
    count = await db.fetchval(
        "SELECT count(*) FROM kb.agent_runs WHERE project_id = $1 AND root_run_id = $2::uuid",
        project_id,
        root_run_id,
    )
    return int(count)


async def previous_in_thread(db: Db, run: RunRecord) -> str | None:
    """The newest completed run of ``run``'s thread queued before it; None for the first."""
    assert run.thread_id is not None
    previous = await db.fetchval(
        _PREVIOUS_IN_THREAD, run.project_id, run.thread_id, run.created_at, run.id
    )
    return str(previous) if previous is not None else None


async def task_creator(db: Db, project_id: str, task_id: uuid.UUID) -> TaskCreator | None:
    """The task (a graph object of the project) with its creator run; None when no such
    task."""
    row = await db.fetchrow(_TASK_CREATOR, project_id, task_id)
    return from_row(TaskCreator, row) if row is not None else None
