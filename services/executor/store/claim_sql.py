"""The run claim statements (DESIGN §4): which queued runs a worker with free slots takes,
fairly across projects, and the crash recovery of expired leases in the same round trip, with
each claimed run's definition: the SQL, and :func:`claim_queued` and :func:`claim_any` that
run it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import asyncpg

from services.executor.registry.definitions import AgentDefinition, definition_from_row
from services.executor.runs import RunRecord
from services.executor.store.caps import capped

# Fairness (issue #15): one project's backlog never hides another's queued runs. The claim
# walks the queue project by project on agent_runs_queued_project_idx: `projects` finds each
# project with queued runs (a loose index scan, one probe per project), and each project
# offers its oldest queued runs, numbered in its own order (`turn`); the claim takes turn 1
# of every project (oldest first), then turn 2, ... -- round robin. The cost is a few index
# probes per project with queued runs plus up to $3 + SKIP_LOCKED_SPARE rows from each
# (projects are made by the operator, not by tenants).
#
# A project may have at most $4 capped runs running (caps.capped: top-level runs and runs of
# tasks), so its capped offer is cut to the slots it has left; a parent's own children are
# exempt, since their parents hold slots while waiting for them. Each offer is one range of
# agent_runs_queued_project_idx (keyed on the same expression; IS FALSE, not NOT, which the
# planner would rewrite out of the index's form). The running counts are not locked:
# concurrent claims may pass a cap by a few runs.
#
# Each project offers SKIP_LOCKED_SPARE more runs than the claim takes (within its slots
# left), so concurrent claimers that find the oldest ones locked by each other move on to
# the next ones instead of coming back empty-handed.
#
# MATERIALIZED: the locking SELECT runs exactly once. As a plain subquery the planner may
# rescan it (a nested loop's inner side), and each rescan skips to other rows: one claim
# for one run could then take several. SKIP LOCKED lets concurrent claimers take disjoint
# runs instead of queueing on one row.
# Threads (issue #19): two runs of one thread never execute at once, and they run in the
# order they were queued. A queued run of a thread is offered only when its thread has no
# older queued run and none running or waiting: one probe of agent_runs_thread_active_idx.
_THREAD_FREE = """
          AND (q.thread_id IS NULL OR NOT EXISTS (
              SELECT 1 FROM kb.agent_runs t
              WHERE t.project_id = q.project_id AND t.thread_id = q.thread_id
                AND t.status IN ('queued', 'running', 'waiting')
                AND (t.status <> 'queued' OR (t.created_at, t.id) < (q.created_at, q.id))))"""

SKIP_LOCKED_SPARE = 64

_CANDIDATES = f"""
projects AS (
    (SELECT project_id FROM kb.agent_runs
     WHERE status = 'queued'
     ORDER BY project_id
     LIMIT 1)
    UNION ALL
    SELECT (SELECT q.project_id FROM kb.agent_runs q
            WHERE q.status = 'queued' AND q.project_id > p.project_id
            ORDER BY q.project_id
            LIMIT 1)
    FROM projects p
    WHERE p.project_id IS NOT NULL
), candidates AS MATERIALIZED (
    SELECT offer.id, offer.created_at,
           row_number() OVER (PARTITION BY p.project_id
                              ORDER BY offer.created_at, offer.id) AS turn
    FROM projects p
    CROSS JOIN LATERAL (
        SELECT count(*) AS n FROM kb.agent_runs r
        WHERE r.project_id = p.project_id AND r.status = 'running' AND {capped("r")}
    ) running
    CROSS JOIN LATERAL (
        (SELECT q.id, q.created_at FROM kb.agent_runs q
         WHERE q.project_id = p.project_id AND q.status = 'queued'
           AND {capped("q")}{_THREAD_FREE}
         ORDER BY q.created_at, q.id
         LIMIT least($3 + {SKIP_LOCKED_SPARE}, greatest(0, $4 - running.n)))
        UNION ALL
        (SELECT q.id, q.created_at FROM kb.agent_runs q
         WHERE q.project_id = p.project_id AND q.status = 'queued'
           AND {capped("q")} IS FALSE{_THREAD_FREE}
         ORDER BY q.created_at, q.id
         LIMIT $3 + {SKIP_LOCKED_SPARE})
    ) offer
    WHERE p.project_id IS NOT NULL
)"""


def _claimable(limit: str) -> str:
    return f"""claimable AS MATERIALIZED (
    SELECT q.id, q.started_at IS NULL AS never_started
    FROM candidates c JOIN kb.agent_runs q ON q.id = c.id
    WHERE q.status = 'queued'
    ORDER BY c.turn, c.created_at, c.id
    LIMIT {limit}
    FOR UPDATE OF q SKIP LOCKED
)"""


_START_CLAIMED = """
UPDATE kb.agent_runs r
SET status = 'running',
    started_at = coalesce(r.started_at, now()),
    lease_owner = $1,
    lease_expires_at = now() + make_interval(secs => $2::double precision)
FROM claimable
WHERE r.id = claimable.id"""

CLAIM = f"""
WITH RECURSIVE {_CANDIDATES}, {_claimable("$3")}
{_START_CLAIMED}
RETURNING r.*
"""

DEFINITION_PREFIX = "definition_"
"""CLAIM_ANY's columns of the run's definition: this prefix, then AgentDefinition's field."""
# The definition a claimed run executes comes with it (issue #17): StartRun and spawns read it
# by name at enqueue, the claim by the id they stored, and the loop reads none -- whichever
# replica claims. Columns named after AgentDefinition's fields, so the list cannot drift from
# the dataclass; product_name is the installing product's, as in DefinitionRepository.
_DEFINITION_COLUMNS = ",\n       ".join(
    f"d.{f.name} AS {DEFINITION_PREFIX}{f.name}"
    for f in fields(AgentDefinition)
    if f.name != "product_name"
)


def claimed_definition(row: Mapping[str, Any]) -> AgentDefinition | None:
    """The definition a CLAIM_ANY row carries; None when the run names none or it is gone."""
    if row[f"{DEFINITION_PREFIX}id"] is None:
        return None
    columns = {f.name: row[DEFINITION_PREFIX + f.name] for f in fields(AgentDefinition)}
    return definition_from_row(columns)  # type: ignore[arg-type]  # reads it by name only


# What a worker with free slots runs, in one round trip. First crash recovery (DESIGN §4):
# running runs whose lease expired -- their worker died, or shut down and released them, or
# ResumeRun handed them over; `expired` walks agent_runs_running_lease_idx and
# previous_owner tells a resume from a recovery. Then, in the slots left, queued runs
# (CLAIM's rows, same fairness), previous_owner NULL. The two UPDATEs touch disjoint rows
# (running vs queued); one statement, one snapshot. Each run comes with its definition
# (NULL columns when it names none or it was deleted), expired runs first.
CLAIM_ANY = f"""
WITH RECURSIVE expired AS MATERIALIZED (
    SELECT id, lease_owner AS previous_owner FROM kb.agent_runs
    WHERE status = 'running' AND lease_expires_at <= now()
    ORDER BY lease_expires_at, id
    LIMIT $3
    FOR UPDATE SKIP LOCKED
), {_CANDIDATES}, {_claimable("greatest(0, $3 - (SELECT count(*) FROM expired))")},
taken_over AS (
    UPDATE kb.agent_runs r
    SET lease_owner = $1,
        lease_expires_at = now() + make_interval(secs => $2::double precision),
        -- The previous worker's model call, and its wait for quota, died with it.
        quota_wait = NULL,
        quota_wait_since = NULL
    FROM expired
    WHERE r.id = expired.id
    RETURNING r.*, expired.previous_owner, false AS never_started
), claimed AS ({_START_CLAIMED}
    RETURNING r.*, NULL::text AS previous_owner, claimable.never_started
), runs AS (
    SELECT * FROM taken_over UNION ALL SELECT * FROM claimed
)
SELECT runs.*,
       {_DEFINITION_COLUMNS},
       coalesce(p.name, '') AS {DEFINITION_PREFIX}product_name
FROM runs
LEFT JOIN kb.agent_definitions d
       ON d.project_id = runs.project_id AND d.id = runs.agent_definition_id
LEFT JOIN kb.products p ON p.id = d.product_id
ORDER BY runs.previous_owner IS NULL
"""


@dataclass(frozen=True, kw_only=True, slots=True)
class ClaimedRun:
    """A run a worker claimed, with what it needs to start it."""

    run: RunRecord
    previous_owner: str | None
    """Lease owner of a run taken over (``RESUME_LEASE_OWNER``: a resumed one); None for a
    run that was queued."""
    definition: AgentDefinition | None
    """The definition the run executes, read by the claim; None when the run names none or
    it was deleted (the loop reads it by name, or reports it missing)."""
    never_started: bool = False
    """Queued and never executed before this claim (no started_at): nothing persisted to
    continue from, so its execution reads no position."""


async def claim_queued(
    pool: asyncpg.Pool, owner: str, lease_s: float, limit: int, max_running: int
) -> list[RunRecord]:
    """:data:`CLAIM`: up to ``limit`` queued runs, ``running`` under ``owner``'s lease."""
    rows = await pool.fetch(CLAIM, owner, lease_s, limit, max_running)
    return [RunRecord.from_row(r) for r in rows]


async def claim_any(
    pool: asyncpg.Pool, owner: str, lease_s: float, limit: int, max_running: int
) -> list[ClaimedRun]:
    """:data:`CLAIM_ANY`: expired leases taken over first, then queued runs."""
    rows = await pool.fetch(CLAIM_ANY, owner, lease_s, limit, max_running)
    return [
        ClaimedRun(
            run=RunRecord.from_row(r),
            previous_owner=r["previous_owner"],
            definition=claimed_definition(r),
            never_started=r["never_started"],
        )
        for r in rows
    ]
