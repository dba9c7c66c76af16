"""The queue-depth queries: what KEDA scales on, and what the queue gauges sample.

One place for each statement. ``deploy/k8s/components/keda`` repeats the two scaler queries
word for word (KEDA's PostgreSQL scaler runs them itself), and a unit test checks that the
YAML and these constants are identical. Each statement is served by a partial index of the
migrations (``tests/integration/test_autoscaling_queries.py`` runs ``EXPLAIN`` on them), so
polling them costs the handful of rows that are queued or in flight, however long the
history grows.
"""

from __future__ import annotations

EXECUTOR_LOAD_SQL = (
    "SELECT (SELECT count(*) FROM kb.agent_runs WHERE status = 'queued')"
    " + (SELECT count(*) FROM kb.agent_runs WHERE status = 'running')"
)
"""Runs that want an executor slot: queued plus running (children included).

Running runs count too, so a busy fleet with an empty queue is not scaled down under its
runs; KEDA divides by ``targetQueryValue`` (= AGENTFLEET_EXECUTOR_CONCURRENCY) per replica.
Served by ``agent_runs_queued_project_idx`` and ``agent_runs_running_lease_idx``."""

DISPATCHER_LOAD_SQL = (
    "SELECT (SELECT count(*) FROM kb.graph_objects WHERE type = 'SpecTask'"
    " AND status = 'pending' AND (properties ->> 'ready') = 'true')"
    " + (SELECT count(*) FROM kb.graph_objects WHERE type = 'SpecTask'"
    " AND status = 'in_progress')"
)
"""Tasks that want a dispatcher slot: available (pending and ready) plus in progress.

KEDA divides by ``targetQueryValue`` (= AGENTFLEET_DISPATCHER_SLOTS) per replica. Served by
``graph_objects_ready_spectasks_idx`` and ``graph_objects_inprogress_spectasks_idx``."""

ACTIVE_RUNS_BY_PROJECT_SQL = """
SELECT project_id, 'queued' AS status, count(*) AS runs
FROM kb.agent_runs
WHERE status = 'queued'
GROUP BY project_id
UNION ALL
SELECT project_id, 'running' AS status, count(*) AS runs
FROM kb.agent_runs
WHERE status = 'running'
GROUP BY project_id
"""
"""Queued and running runs per project, for the ``agentfleet.runs.active`` gauge (one arm
per status, so each arm reads its own partial index). The status is a literal, not the
column: an arm that needs only ``project_id`` can be answered from its partial index alone,
so the planner is never tempted by the index-only scan of (project_id, status, ...), which
reads every run ever made."""

TASKS_BY_STATE_SQL = """
SELECT CASE WHEN (properties ->> 'ready') = 'true' THEN 'ready' ELSE 'blocked' END AS state,
       count(*) AS tasks
FROM kb.graph_objects
WHERE type = 'SpecTask' AND status = 'pending'
GROUP BY 1
UNION ALL
SELECT 'in_progress', count(*)
FROM kb.graph_objects
WHERE type = 'SpecTask' AND status = 'in_progress'
"""
"""SpecTasks by dispatch state (``blocked``, ``ready``, ``in_progress``), for the
``agentfleet.tasks`` gauge; served by the pending and in-progress partial indexes."""

TRIGGER_OUTBOX_BACKLOG_SQL = """
SELECT (SELECT count(*) FROM kb.trigger_outbox WHERE consumed_at IS NULL) AS pending,
       extract(epoch FROM now() - (SELECT created_at FROM kb.trigger_outbox
                                    WHERE consumed_at IS NULL ORDER BY id LIMIT 1))::float8
           AS oldest_age_s
"""
"""Trigger outbox events not consumed yet, and the age of the oldest (NULL: none), for the
``agentfleet.triggers.outbox.*`` gauges. Deployment-wide, no project: the backlog of one
consumer pool, and a label per project would let tenants grow the series. Both arms read
``trigger_outbox_pending_idx`` (the oldest is its first entry, ids growing with time)."""
