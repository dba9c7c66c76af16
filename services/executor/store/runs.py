"""``kb.agent_runs``: every statement the executor runs on it (DESIGN §4).

Each status change is a conditional UPDATE that returns the row when it applied and None when
the run had moved on, so two workers (or a worker and a CancelRun) never both move one run.
Functions take the caller's pool or connection: the caller owns the transaction.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import asyncpg

from agentfleet.errors import NotFound
from agentfleet.events import ANSWERED_MODEL, RunQueued, events_statement
from agentfleet.events import CHANNEL as EVENTS_CHANNEL
from agentfleet.events.visibility import is_internal
from agentfleet.postgres.sql_blocks import compose
from services.executor.runs import RunRecord, RunStatus, StartRunParams
from services.executor.store.group_commit import RUN_COLUMN, GroupCommit

Db = asyncpg.Pool | asyncpg.Connection

QUEUED_CHANNEL = "agentfleet_runs_queued"
"""NOTIFY channel of newly queued runs; payload: the run id."""

# $16: the project's cap on queued runs that count toward it (caps.capped; NULL: none, as
# for children). The sums read the project's counters and pending deltas (migration 0030)
# without locking, only so that a full queue refuses before locking or writing anything; the
# exact admission is kb.admit_new_run (migration 0034), whose answer is the counter shard the
# run counts in (NULL: refused, nothing written). $21: the shard it tries first
# (QUEUE_SHARDS). $22: a remote child's agent (migration 0028). $28: whether the admission
# may lock every shard of the project: false for a grouped write, whose full shard fails the
# statement with AFQ02 (no subtransaction, so no transaction id of its own) and the run is
# admitted again alone; true in a caller's transaction. $29: the run's id, chosen by the
# caller so that a group can tell its writes apart before they are written.
#
# created_at is the clock when the row is written, not the column's default now() (the
# transaction's start): a thread's run takes its thread's lock in between (RunQueue.enqueue),
# and a thread's runs are claimed and continued in created_at order, which must be the order
# they were accepted (committed). With now(), a run whose transaction began first but got the
# lock last was older than a run already claimed, and ran without that run's turn (issue 37).
_ADMISSION = """
SELECT CASE WHEN $16::integer IS NULL THEN $21::smallint
            ELSE kb.admit_new_run($1::text, $21::smallint, $16::integer, $28::boolean) END
       AS shard
WHERE $16::integer IS NULL
   OR coalesce((SELECT sum(c.queued) FROM kb.run_queue_counts c
                WHERE c.project_id = $1::text), 0)
      + coalesce((SELECT sum(d.delta) FROM kb.run_queue_deltas d
                  WHERE d.project_id = $1::text), 0) < $16::integer
"""
_INSERT = """
INSERT INTO kb.agent_runs (
    id, project_id, agent_definition_id, agent_name, input, labels, max_steps, timeout,
    request_id, task_id, trace_id, trace_parent, parent_run_id, root_run_id, depth, max_tokens,
    thread_id, stream_deltas, request_fingerprint, max_tree_cost_nanos, queue_shard,
    remote_agent, started_by, trigger_origin, chain_depth, created_at, last_event_seq)
SELECT $29::uuid, $1::text, $2::uuid, $3::text, $4::text, $5::jsonb, $6::integer,
       make_interval(secs => $7::double precision), $8::text, $9::uuid, $10::text, $11::text,
       $12::uuid, $13::uuid, $14::integer, $15::bigint, $17::text,
       $18::boolean, $19::text, $20::bigint, admission.shard, $22::jsonb,
       coalesce($23::text, CASE WHEN $9::uuid IS NOT NULL THEN 'task'
                                WHEN $12::uuid IS NOT NULL THEN 'parent' ELSE 'rpc' END),
       $24::jsonb, $25::integer, clock_timestamp(), 1
FROM admission WHERE admission.shard IS NOT NULL
ON CONFLICT (project_id, request_id) WHERE request_id IS NOT NULL DO NOTHING
RETURNING *, extract(epoch FROM timeout) AS timeout_s
"""
# The admission, the insert and its RUN_QUEUED event (seq 1, the run row as written:
# fragment run_row) in one statement, so that concurrent enqueues commit together
# (RunQueue.enqueue); and, when $26, the workers' wake-up and the event's notification
# (NOTIFY is delivered at commit, so no worker looks before the run and its event are
# visible). Without $26 the caller sends them once committed: a transaction that NOTIFYs
# holds the cluster's notification lock through its commit's WAL flush, so every such
# enqueue of every replica would commit one at a time. $27: whether RUN_QUEUED is internal
# (agentfleet.events.visibility decides, as for every event).
_INSERT_AND_NOTIFY = events_statement(
    "insert_queued",
    f"""
WITH admission AS MATERIALIZED ({_ADMISSION}),
inserted AS ({_INSERT}),
queued_event AS (
    INSERT INTO kb.agent_run_events (
        run_id, seq, root_run_id, type, agent_name, is_internal, payload)
    SELECT r.id, 1, r.root_run_id, 'run_queued', r.agent_name, $27::boolean,
-- include: run_row
    FROM inserted r
)
SELECT inserted.*, inserted.id AS {RUN_COLUMN},
       CASE WHEN $26::boolean THEN pg_notify('{QUEUED_CHANNEL}', inserted.id::text) END,
       CASE WHEN $26::boolean THEN pg_notify('{EVENTS_CHANNEL}', inserted.id || ':1') END
FROM inserted
""",
).text
_QUEUED_INTERNAL = is_internal(RunQueued(agent_name="", run={}))

QUEUE_SHARDS = 16
"""Counter shards of a project's queued-runs cap (kb.run_queue_quota, migration 0030): a run
is counted in a random one of the first min(16, cap), so concurrent enqueues of a project
lock different counters."""

DEFINITION_FOREIGN_KEY = "agent_runs_agent_definition_id_fkey"
"""agent_runs.agent_definition_id's foreign key (migration 0004)."""

_ELAPSED_MS = """greatest(0, (extract(epoch FROM clock_timestamp()
                                       - coalesce(started_at, created_at)) * 1000)::bigint)"""

_FINISH_SET = f"""status = :status,
        summary = :summary,
        error_message = :error_message,
        completed_at = now(),
        duration_ms = {_ELAPSED_MS},
        lease_owner = NULL,
        lease_expires_at = NULL,
        output = :output::jsonb,
        quota_wait = NULL,
        quota_wait_since = NULL"""
_FINISH_WHERE = (
    "project_id = :project_id AND id = :run_id::uuid AND status = ANY(:from_statuses::text[])"
)

_FINISH = compose(
    "finish",
    f"""UPDATE kb.agent_runs r SET {_FINISH_SET} WHERE {_FINISH_WHERE}
    RETURNING *, {ANSWERED_MODEL}""",
    {},
)

RECORD_FINISH = events_statement(
    "record_finish",
    f"""
WITH numbered AS (
    UPDATE kb.agent_runs r
    SET {_FINISH_SET},
        last_event_seq = last_event_seq + cardinality(:event_types::text[])
    WHERE {_FINISH_WHERE}
    RETURNING r.*, {ANSWERED_MODEL}, extract(epoch FROM r.timeout) AS timeout_s
),
-- include: no_calls_written
-- include: insert_events
SELECT numbered.*, numbered.id AS written_run_id, ev.seq FROM numbered LEFT JOIN ev ON true
""",
)
""":func:`finish` with the events of the end, one statement (so that concurrent runs' ends
are committed together, :mod:`~services.executor.store.group_commit`); the run row (and
``written_run_id``, ``seq``) in every row, one per event. Its RUN_FINISHED (``run``: {})
stores the row written (fragment insert_events). No row when the transition did not apply."""

_REQUEST_CANCEL = """
UPDATE kb.agent_runs
SET cancel_requested_at = coalesce(cancel_requested_at, now())
WHERE project_id = $1 AND id = $2::uuid
  AND status IN ('queued', 'running', 'waiting', 'paused')
RETURNING *
"""

_PARK_WAITING = """
UPDATE kb.agent_runs
SET status = 'waiting', lease_owner = NULL, lease_expires_at = NULL, waiting_since = now(),
    quota_wait = NULL, quota_wait_since = NULL
WHERE project_id = $1 AND id = $2::uuid AND lease_owner = $3 AND status = 'running'
RETURNING *
"""

_REQUEUE_WAITING = """
UPDATE kb.agent_runs
SET status = 'queued',
    waited_ms = waited_ms + greatest(0, (extract(epoch FROM clock_timestamp() - waiting_since)
                                         * 1000)::bigint),
    waiting_since = NULL
WHERE project_id = $1 AND id = $2::uuid AND status = 'waiting'
RETURNING *
"""

_FAIL_WAITING = f"""
UPDATE kb.agent_runs
SET status = 'failed', error_message = $3, completed_at = now(), waiting_since = NULL,
    duration_ms = {_ELAPSED_MS}
WHERE project_id = $1 AND id = $2::uuid AND status = 'waiting'
RETURNING *
"""

_RESUME = """
UPDATE kb.agent_runs
SET status = 'running',
    step_count = 0,
    resume_count = resume_count + 1,
    max_steps = coalesce($3, max_steps),
    timeout = coalesce(make_interval(secs => $4::double precision), timeout),
    error_message = NULL,
    completed_at = NULL,
    duration_ms = NULL,
    cancel_requested_at = NULL,
    lease_owner = $5,
    lease_expires_at = now(),
    max_tokens = coalesce($6, max_tokens),
    -- runs.streams_deltas with followed=True: ResumeRun streams the execution it starts.
    stream_deltas = coalesce(
        (SELECT d.streaming FROM kb.agent_definitions d
         WHERE d.id = kb.agent_runs.agent_definition_id), true)
WHERE project_id = $1 AND id = $2::uuid AND status = 'paused'
RETURNING *
"""

_HAND_OVER_PAUSED = """
UPDATE kb.agent_runs
SET status = 'running', completed_at = NULL, duration_ms = NULL,
    lease_owner = $3, lease_expires_at = now(),
    remote_agent = remote_agent || jsonb_build_object('cancel_reason', $4::text)
WHERE project_id = $1 AND id = $2::uuid AND status = 'paused' AND remote_agent IS NOT NULL
RETURNING *
"""

_TREE_TOKENS = """
UPDATE kb.agent_runs p
SET (tokens_total_tree, cost_total_tree_nanos) = (
    SELECT p.tokens_in + p.tokens_out + coalesce(sum(c.tokens_total_tree), 0),
           p.cost_nanos + coalesce(sum(c.cost_total_tree_nanos), 0)
    FROM kb.agent_runs c WHERE c.parent_run_id = p.id AND c.project_id = $1)
WHERE p.project_id = $1 AND p.id = $2::uuid
RETURNING p.tokens_total_tree
"""

_GET = "SELECT * FROM kb.agent_runs WHERE project_id = $1 AND id = $2::uuid"
_LOCKS = {"": "", "lock": " FOR UPDATE", "skip_locked": " FOR UPDATE SKIP LOCKED"}


async def _one(db: Db, statement: str, *args: Any) -> RunRecord | None:
    """The run a statement returns, None when it returns no row."""
    row = await db.fetchrow(statement, *args)
    return RunRecord.from_row(row) if row is not None else None


ADMIT_ALONE = "AFQ02"
"""SQLSTATE of kb.admit_new_run when a run of a group needs every shard of its project
locked (migration 0034): it is admitted again alone."""


async def insert_queued(
    db: Db,
    params: StartRunParams,
    *,
    max_queued: int | None,
    notify: bool,
    group: GroupCommit | None = None,
) -> RunRecord | None:
    """Inserts a ``queued`` run with its RUN_QUEUED event (seq 1), admitted exactly to its
    project's cap of ``max_queued`` queued capped runs (None: no cap, as for children), and
    with ``notify`` NOTIFYs the workers and the run's followers (at commit); None when the
    project's ``request_id`` exists already or the cap is reached (nothing written).

    ``group``: committed with other runs' enqueues (``db`` is then the group's pool, the
    caller holds no transaction); a run that needs its whole project's counters locked goes
    again alone. Without it, in ``db``'s transaction: the counters the admission read stay
    locked until that transaction ends, so commit right after.
    :class:`NotFound` naming the agent when its definition (``agent_definition_id``) was
    deleted since the caller read it (in a transaction, that transaction is aborted)."""
    run_id = str(uuid.uuid4())
    shard = 0 if max_queued is None else random.randrange(min(QUEUE_SHARDS, max_queued))
    try:
        if group is not None:
            arguments = _insert_arguments(params, max_queued, notify, shard, False, run_id)
            try:
                # Shard order inside a project: a group takes its counters in one order.
                rows = await group.fetch(
                    _INSERT_AND_NOTIFY,
                    arguments,
                    project_id=params.project_id,
                    run_id=run_id,
                    order=f"{shard:02d}",
                )
                return RunRecord.from_row(rows[0]) if rows else None
            except asyncpg.PostgresError as exc:
                if exc.sqlstate != ADMIT_ALONE:
                    raise
        arguments = _insert_arguments(params, max_queued, notify, shard, True, run_id)
        return await _one(db, _INSERT_AND_NOTIFY, *arguments)
    except asyncpg.ForeignKeyViolationError as exc:
        # The definition's delete (DeleteAgentDefinition, a product upgrade) committed between
        # the caller's read and this insert. The foreign key's own check is the one that sees
        # it, so it is answered here, once for every caller, as the agent being missing;
        # locking the row in each caller's transaction would cost a round trip per run.
        if exc.constraint_name != DEFINITION_FOREIGN_KEY:
            raise
        raise NotFound(
            f"agent {params.agent_name!r} not found in project {params.project_id!r}"
        ) from exc


def _insert_arguments(
    params: StartRunParams,
    max_queued: int | None,
    notify: bool,
    shard: int,
    may_wait: bool,
    run_id: str,
) -> tuple[Any, ...]:
    return (
        params.project_id,
        params.agent_definition_id,
        params.agent_name,
        params.input,
        dict(params.labels),
        params.max_steps,
        params.timeout_s,
        params.request_id,
        params.task_id,
        params.trace_id,
        params.trace_parent,
        params.parent_run_id,
        params.root_run_id,
        params.depth,
        params.max_tokens,
        max_queued,
        params.thread_id,
        params.stream_deltas,
        params.request_fingerprint,
        params.max_tree_cost_nanos,
        shard,
        dict(params.remote_agent) if params.remote_agent is not None else None,
        params.started_by,
        dict(params.trigger_origin) if params.trigger_origin is not None else None,
        params.chain_depth,
        notify,
        _QUEUED_INTERNAL,
        may_wait,
        run_id,
    )


async def set_remote_task(
    db: Db, project_id: str, run_id: str, fields: Mapping[str, str], *, owner: str
) -> bool:
    """Merges ``fields`` (url, card_name, task_id, context_id) into the running remote
    child's ``remote_agent`` while ``owner`` holds it; whether it did."""
    updated = await db.fetchval(
        """UPDATE kb.agent_runs SET remote_agent = remote_agent || $3::jsonb
           WHERE id = $1::uuid AND project_id = $2 AND remote_agent IS NOT NULL
             AND status = 'running' AND lease_owner = $4
           RETURNING id""",
        run_id,
        project_id,
        dict(fields),
        owner,
    )
    return updated is not None


async def by_request_id(db: Db, project_id: str, request_id: str) -> RunRecord | None:
    """The project's run of ``request_id`` (with its ``request_fingerprint``), if any."""
    return await _one(
        db,
        "SELECT * FROM kb.agent_runs WHERE project_id = $1 AND request_id = $2",
        project_id,
        request_id,
    )


async def find(
    db: Db, project_id: str, run_id: str, *, lock: Literal["", "lock", "skip_locked"] = ""
) -> RunRecord | None:
    """The run, or None when it is not in the project. ``lock``: ``"lock"`` (FOR UPDATE) or
    ``"skip_locked"`` (None too when another transaction holds it), in the caller's
    transaction."""
    return await _one(db, _GET + _LOCKS[lock], project_id, run_id)


async def read_run(db: Db, project_id: str, run_id: str, *, lock: bool = False) -> RunRecord:
    """The run; :class:`NotFound` when it is not in the project. ``lock``: FOR UPDATE, in the
    caller's transaction."""
    run = await find(db, project_id, run_id, lock="lock" if lock else "")
    if run is None:
        raise NotFound(f"run {run_id} not found in project {project_id!r}")
    return run


async def finish(
    db: Db,
    project_id: str,
    run_id: str,
    *,
    status: RunStatus,
    summary: str | None = None,
    error_message: str | None = None,
    from_statuses: Sequence[RunStatus] = ("running",),
    output: dict[str, Any] | None = None,
) -> RunRecord | None:
    """``status`` with completed_at and duration, the lease dropped, if the run is in one of
    ``from_statuses``; None when the transition did not apply. ``output``: the structured
    final answer (None clears it)."""
    return await _one(
        db,
        _FINISH.text,
        *_FINISH.arguments(
            {
                "project_id": project_id,
                "run_id": run_id,
                "from_statuses": list(from_statuses),
                "status": status,
                "summary": summary,
                "error_message": error_message,
                "output": output,
            }
        ),
    )


async def request_cancel(db: Db, project_id: str, run_id: str) -> RunRecord | None:
    """Sets cancel_requested_at of a run that has not ended (the row stays locked)."""
    return await _one(db, _REQUEST_CANCEL, project_id, run_id)


async def park_waiting(db: Db, project_id: str, run_id: str, owner: str) -> RunRecord | None:
    """``running -> waiting`` (no lease) while ``owner`` holds the run."""
    return await _one(db, _PARK_WAITING, project_id, run_id, owner)


async def requeue_waiting(db: Db, project_id: str, run_id: str) -> RunRecord | None:
    """``waiting -> queued``, the time waited added to waited_ms."""
    return await _one(db, _REQUEUE_WAITING, project_id, run_id)


async def fail_waiting(db: Db, project_id: str, run_id: str, message: str) -> RunRecord | None:
    """``waiting -> failed`` with ``message``."""
    return await _one(db, _FAIL_WAITING, project_id, run_id, message)


async def resume(
    db: Db,
    project_id: str,
    run_id: str,
    *,
    max_steps: int | None,
    timeout_s: float | None,
    lease_owner: str,
    max_tokens: int | None,
) -> RunRecord | None:
    """``paused -> running`` with a fresh step budget, as an already expired lease of
    ``lease_owner`` (the next worker claims it at once)."""
    return await _one(
        db, _RESUME, project_id, run_id, max_steps, timeout_s, lease_owner, max_tokens
    )


async def hand_over_paused(
    db: Db, project_id: str, run_id: str, *, lease_owner: str, reason: str
) -> RunRecord | None:
    """A paused remote child with a cancel request back to ``running``, as an expired lease
    of ``lease_owner`` (the next worker claims it at once), ``reason`` on its remote_agent."""
    return await _one(db, _HAND_OVER_PAUSED, project_id, run_id, lease_owner, reason)


async def refresh_tree_tokens(db: Db, project_id: str, run_id: str) -> int:
    """Recomputes the run's tokens_total_tree (and cost_total_tree_nanos) from its own
    tokens (cost) and its children's tree totals (idempotent, so a re-attached or resumed
    child is never counted twice)."""
    total = await db.fetchval(_TREE_TOKENS, project_id, run_id)
    return int(total or 0)


async def next_event_seq(db: Db, project_id: str, run_id: str) -> int:
    """The seq the run's next stored event will have (while this worker holds its lease,
    only it appends the run's events)."""
    seq = await db.fetchval(
        "SELECT last_event_seq + 1 FROM kb.agent_runs WHERE project_id = $1 AND id = $2::uuid",
        project_id,
        run_id,
    )
    return int(seq or 1)
