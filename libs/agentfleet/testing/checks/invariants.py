"""Database invariants every test (and the soak) can check at its end.

:func:`check_invariants` runs one read-only query per rule against ``kb`` and returns the
violations as readable strings (empty when everything holds); :func:`assert_invariants`
raises AssertionError listing them. The rules (DESIGN §4, §5):

- ``run_state``: every run is terminal or paused, or queued/running with a live lease (a
  queued run may have none yet). A run ResumeRun just re-opened carries the marker owner
  ``resume-requested`` with an expired lease on purpose; it is accepted.
- ``tool_pairing``: every TOOL_REQUEST event has exactly one TOOL_RESPONSE with the same
  tool_call_id in the same run (a queued, running or waiting run may have requests in
  flight or held for approval), and no
  TOOL_RESPONSE answers a request that was never made.
- ``event_seq``: event seqs of a run are exactly 1..max.
- ``terminal_times``: terminal runs have completed_at and duration_ms.
- ``terminal_lease``: terminal and paused runs hold no lease.
- ``open_tool_calls``: terminal and paused runs have no tool call row left ``started``,
  ``awaiting_approval`` or ``approved``.
- ``waiting_state``: a ``waiting`` run holds no lease and has at least one call
  ``awaiting_approval`` (several when one step held several calls); no other run has one.
- ``run_tree``: a child's parent exists in the same project, has the same root_run_id, and
  the child's depth is the parent's + 1; a top-level run is its own root at depth 0.
- ``message_seq``: message seqs of a run are exactly 0..max.
- ``event_counter``: a run's ``last_event_seq`` (where the next event's seq comes from) is
  its newest event's seq, 0 with none; an event written around ``append_events`` breaks it.
- ``queue_counter``: a project's queued-runs counter (``kb.run_queue_counts`` plus its
  pending ``kb.run_queue_deltas``, migration 0030) is its number of queued capped runs.
- ``graph_status``: every task graph's status kept in ``kb.task_graph_states`` is the one
  ``kb.task_graph_status`` derives from its tasks now (DESIGN §9; migration 0020).

Every query takes an optional project filter, so a test sharing a database with others can
check only its own project.
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

TERMINAL = ("completed", "failed", "cancelled")
RESUME_LEASE_OWNER = "resume-requested"
"""Mirrors ``services.executor.queue.RESUME_LEASE_OWNER`` (libs may not import services)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Rule:
    """One invariant: a query returning offending rows, and how to describe each."""

    name: str
    sql: str
    """Takes ``$1`` = project_id or NULL for every project."""
    describe: str
    """A format string over the row's columns."""


_PROJECT = "($1::text IS NULL OR r.project_id = $1)"
_AWAITING = (
    "SELECT 1 FROM kb.agent_run_tool_calls t "
    "WHERE t.run_id = r.id AND t.status = 'awaiting_approval'"
)


_STOPPED = "(r.status = ANY($2::text[]) OR r.status = 'paused')"
"""Terminal (``$2``) or paused: the run holds nothing any more."""


def _run_rule(name: str, columns: str, condition: str, describe: str) -> Rule:
    """A rule over the runs alone: ``condition`` picks the runs that break it; the row has
    ``id``, ``status`` and ``columns``."""
    return Rule(
        name=name,
        sql=f"""
            SELECT r.id, r.status, {columns}
            FROM kb.agent_runs r
            WHERE {_PROJECT} AND ({condition})""",
        describe=describe,
    )


def _gapless(name: str, table: str, what: str, first: int) -> Rule:
    """The seqs of each run's rows in ``table`` are exactly ``first`` .. ``first + n - 1``."""
    return Rule(
        name=name,
        sql=f"""
            SELECT x.run_id AS id, count(*) AS n, min(x.seq) AS first, max(x.seq) AS last
            FROM {table} x JOIN kb.agent_runs r ON r.id = x.run_id
            WHERE {_PROJECT}
            GROUP BY x.run_id
            HAVING min(x.seq) <> {first} OR max(x.seq) - min(x.seq) + 1 <> count(*)""",
        describe=f"run {{id}}: {{n}} {what} with seqs {{first}}..{{last}} "
        f"(not gapless from {first})",
    )


RULES: tuple[Rule, ...] = (
    _run_rule(
        "run_state",
        "r.lease_owner, r.lease_expires_at",
        f"""r.status IN ('queued', 'running')
              AND coalesce(r.lease_owner, '') <> '{RESUME_LEASE_OWNER}'
              AND CASE WHEN r.status = 'running'
                       THEN r.lease_expires_at IS NULL OR r.lease_expires_at <= now()
                       ELSE r.lease_expires_at IS NOT NULL AND r.lease_expires_at <= now()
                  END""",
        "run {id} is {status} without a live lease "
        "(owner {lease_owner}, expires {lease_expires_at})",
    ),
    Rule(
        name="tool_pairing",
        sql=f"""
            WITH calls AS (
                SELECT e.run_id, e.payload->>'tool_call_id' AS tool_call_id,
                       count(*) FILTER (WHERE e.type = 'tool_request') AS requests,
                       count(*) FILTER (WHERE e.type = 'tool_response') AS responses
                FROM kb.agent_run_events e
                JOIN kb.agent_runs r ON r.id = e.run_id
                WHERE {_PROJECT} AND e.type IN ('tool_request', 'tool_response')
                GROUP BY e.run_id, e.payload->>'tool_call_id'
            )
            SELECT c.run_id AS id, c.tool_call_id, c.requests, c.responses, r.status
            FROM calls c JOIN kb.agent_runs r ON r.id = c.run_id
            WHERE c.requests <> 1
               OR c.responses > 1
               OR (c.responses = 0 AND r.status NOT IN ('queued', 'running', 'waiting'))""",
        describe="run {id} ({status}): tool call {tool_call_id!r} has {requests} "
        "TOOL_REQUEST and {responses} TOOL_RESPONSE events",
    ),
    _gapless("event_seq", "kb.agent_run_events", "events", first=1),
    _run_rule(
        "terminal_times",
        "r.completed_at, r.duration_ms",
        "r.status = ANY($2::text[]) AND (r.completed_at IS NULL OR r.duration_ms IS NULL)",
        "run {id} is {status} with completed_at {completed_at} and duration_ms {duration_ms}",
    ),
    _run_rule(
        "terminal_lease",
        "r.lease_owner, r.lease_expires_at",
        f"{_STOPPED} AND r.lease_owner IS NOT NULL",
        "run {id} is {status} but still leased by {lease_owner} until {lease_expires_at}",
    ),
    Rule(
        name="open_tool_calls",
        sql=f"""
            SELECT r.id, r.status, t.tool_call_id, t.tool_name
            FROM kb.agent_run_tool_calls t JOIN kb.agent_runs r ON r.id = t.run_id
            WHERE {_PROJECT} AND {_STOPPED}
              AND t.status IN ('started', 'awaiting_approval', 'approved')""",
        describe="run {id} is {status} but tool call {tool_call_id!r} ({tool_name}) is still open",
    ),
    _run_rule(
        "waiting_state",
        "r.lease_owner, r.waiting_since",
        f"""CASE WHEN r.status = 'waiting'
                       THEN r.lease_owner IS NOT NULL OR r.waiting_since IS NULL
                            OR NOT EXISTS ({_AWAITING})
                       ELSE EXISTS ({_AWAITING})
                  END""",
        "run {id} is {status} (lease owner {lease_owner}, waiting since "
        "{waiting_since}): a waiting run holds no lease and has a call awaiting approval, "
        "and only a waiting run has one",
    ),
    Rule(
        name="run_tree",
        sql=f"""
            SELECT r.id, r.parent_run_id, r.root_run_id, r.depth,
                   p.project_id AS parent_project, p.root_run_id AS parent_root,
                   p.depth AS parent_depth
            FROM kb.agent_runs r
            LEFT JOIN kb.agent_runs p ON p.id = r.parent_run_id
            WHERE {_PROJECT}
              AND CASE WHEN r.parent_run_id IS NULL
                       THEN r.root_run_id <> r.id OR r.depth <> 0
                       ELSE p.id IS NULL
                            OR p.project_id <> r.project_id
                            OR p.root_run_id <> r.root_run_id
                            OR r.depth <> p.depth + 1
                  END""",
        describe="run {id} (parent {parent_run_id}, root {root_run_id}, depth {depth}) "
        "disagrees with its parent (project {parent_project}, root {parent_root}, "
        "depth {parent_depth})",
    ),
    _gapless("message_seq", "kb.agent_run_messages", "messages", first=0),
    Rule(
        name="event_counter",
        sql=f"""
            SELECT r.id, r.last_event_seq AS counter, coalesce(max(e.seq), 0) AS newest
            FROM kb.agent_runs r LEFT JOIN kb.agent_run_events e ON e.run_id = r.id
            WHERE {_PROJECT}
            GROUP BY r.id
            HAVING r.last_event_seq <> coalesce(max(e.seq), 0)""",
        describe="run {id}: last_event_seq {counter} but newest event seq {newest}",
    ),
    Rule(
        name="queue_counter",
        sql=f"""
            SELECT r.project_id, r.kept, r.queued FROM (
                SELECT p.project_id,
                       coalesce((SELECT sum(c.queued) FROM kb.run_queue_counts c
                                 WHERE c.project_id = p.project_id), 0)
                       + coalesce((SELECT sum(d.delta) FROM kb.run_queue_deltas d
                                   WHERE d.project_id = p.project_id), 0) AS kept,
                       (SELECT count(*) FROM kb.agent_runs q
                        WHERE q.project_id = p.project_id AND q.status = 'queued'
                          AND (q.depth = 0 OR q.task_id IS NOT NULL)) AS queued
                FROM (SELECT project_id FROM kb.run_queue_counts
                      UNION SELECT project_id FROM kb.run_queue_deltas
                      UNION SELECT project_id FROM kb.agent_runs WHERE status = 'queued') p
            ) r
            WHERE {_PROJECT} AND r.kept <> r.queued""",
        describe="project {project_id}: queued-runs counter {kept} but {queued} queued",
    ),
    Rule(
        name="graph_status",
        sql=f"""
            SELECT r.id, s.status AS kept, d.status AS derived
            FROM kb.graph_objects r
            LEFT JOIN kb.task_graph_states s ON s.graph_id = r.id
            CROSS JOIN LATERAL (
                SELECT kb.task_graph_status(r.project_id, r.id, r.status) AS status) d
            WHERE {_PROJECT} AND r.type = 'TaskGraph' AND s.status IS DISTINCT FROM d.status""",
        describe="task graph {id}: status kept as {kept} but derived {derived}",
    ),
)


async def check_invariants(pool: asyncpg.Pool, *, project_id: str | None = None) -> list[str]:
    """Every violation of :data:`RULES` (of one project, or all), as ``"rule: text"``."""
    violations: list[str] = []
    async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read"):
        # One snapshot for every rule, so a run finishing meanwhile cannot look half-done.
        for rule in RULES:
            args: tuple[object, ...] = (project_id,)
            if "$2" in rule.sql:
                args = (project_id, list(TERMINAL))
            for row in await conn.fetch(rule.sql, *args):
                violations.append(f"{rule.name}: {rule.describe.format(**dict(row))}")
    return violations


async def assert_invariants(pool: asyncpg.Pool, *, project_id: str | None = None) -> None:
    """Raises AssertionError listing every violation of :func:`check_invariants`."""
    violations = await check_invariants(pool, project_id=project_id)
    if violations:
        listed = "\n  ".join(violations)
        raise AssertionError(f"{len(violations)} database invariant(s) violated:\n  {listed}")
