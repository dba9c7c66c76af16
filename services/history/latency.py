"""Step and model-call latency for GetAgentStats (AgentStats.p50_step_duration and the
rest), from the stored conversation: no column records either duration, but every message
is stored as it happens (``agent_run_messages.created_at``), so

- a **model call** lasted from the message it answered (the input, or the last tool
  results) to the model's reply: consecutive messages of the run, in seq order;
- a **step** lasted from the end of the step before (step 0 is the input) to its own last
  message (the reply, or the results of the tools it asked for).

Bounded: only the newest :data:`MAX_LATENCY_RUNS` runs of the window are read, through the
project's runs (the messages are reached by run id), one statement.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import asyncpg

from services.history.queries import NOT_INTERNAL_AGENT

MAX_LATENCY_RUNS = 2000
"""Runs a GetAgentStats reads the messages of, newest first (each has at most a few
messages per step, and steps are capped per run)."""

_QUERY = f"""
WITH runs AS (
    SELECT r.id, r.agent_name
    FROM kb.agent_runs r
    WHERE r.project_id = $1 AND r.created_at >= $2 AND r.created_at < $3
      AND ($4::text IS NULL OR r.agent_name = $4)
      AND ($4::text IS NOT NULL OR $5 OR {NOT_INTERNAL_AGENT})
    ORDER BY r.created_at DESC, r.id DESC
    LIMIT $6
),
messages AS (
    SELECT m.run_id, runs.agent_name, m.role, m.step_number, m.created_at,
           extract(epoch FROM m.created_at - lag(m.created_at)
                   OVER (PARTITION BY m.run_id ORDER BY m.seq)) AS since_previous_s
    FROM runs JOIN kb.agent_run_messages m ON m.run_id = runs.id
),
steps AS (
    SELECT agent_name, step_number,
           extract(epoch FROM max(created_at) - lag(max(created_at))
                   OVER (PARTITION BY run_id ORDER BY step_number)) AS took_s
    FROM messages
    GROUP BY run_id, agent_name, step_number
),
step_stats AS (
    SELECT agent_name,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY took_s) AS step_p50_s,
           percentile_cont(0.95) WITHIN GROUP (ORDER BY took_s) AS step_p95_s
    FROM steps WHERE step_number > 0 AND took_s IS NOT NULL
    GROUP BY agent_name
),
model_stats AS (
    SELECT agent_name,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY since_previous_s) AS model_p50_s,
           percentile_cont(0.95) WITHIN GROUP (ORDER BY since_previous_s) AS model_p95_s
    FROM messages WHERE role = 'model' AND since_previous_s IS NOT NULL
    GROUP BY agent_name
),
counts AS (SELECT agent_name, count(*) AS runs FROM runs GROUP BY agent_name)
SELECT c.agent_name, c.runs, s.step_p50_s, s.step_p95_s, m.model_p50_s, m.model_p95_s
FROM counts c
LEFT JOIN step_stats s USING (agent_name)
LEFT JOIN model_stats m USING (agent_name)
"""


@dataclass(frozen=True, slots=True)
class Latency:
    """One agent's latency percentiles in seconds (``None``: nothing to measure)."""

    runs: int
    step_p50_s: float | None
    step_p95_s: float | None
    model_p50_s: float | None
    model_p95_s: float | None


async def agent_latency(
    pool: asyncpg.Pool,
    project_id: str,
    *,
    agent_name: str | None,
    start: datetime,
    end: datetime,
    include_internal_agents: bool,
) -> dict[str, Latency]:
    """Per agent, over the runs created in [start, end) (the newest
    :data:`MAX_LATENCY_RUNS` of them)."""
    rows = await pool.fetch(
        _QUERY, project_id, start, end, agent_name, include_internal_agents, MAX_LATENCY_RUNS
    )

    def seconds(value: object) -> float | None:
        return None if value is None else float(value)  # type: ignore[arg-type]

    return {
        row["agent_name"]: Latency(
            runs=int(row["runs"]),
            step_p50_s=seconds(row["step_p50_s"]),
            step_p95_s=seconds(row["step_p95_s"]),
            model_p50_s=seconds(row["model_p50_s"]),
            model_p95_s=seconds(row["model_p95_s"]),
        )
        for row in rows
    }
