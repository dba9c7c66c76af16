"""GetAgentStats' step and model-call latency (issue 34, item 4), from stored conversations
on real PostgreSQL through the history service over gRPC: percentiles per agent, only the
caller's project's runs, only the newest runs of the window when there are many."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from agentfleet.testing import factories as f
from agentfleet.testing.services import Stack, start_stack
from agentfleet.v1 import history_pb2, history_pb2_grpc
from services.history import latency

P = "latency-a"
OTHER = "latency-b"


async def _conversation(
    db: asyncpg.Pool, run: dict[str, Any], start: datetime, messages: list[tuple[str, int, float]]
) -> None:
    """Messages (role, step, seconds after ``start``) stored at those times, in seq order."""
    for seq, (role, step, after_s) in enumerate(messages):
        row = await f.insert_message(db, run=run, seq=seq, role=role, step=step)
        await db.execute(
            "UPDATE kb.agent_run_messages SET created_at = $2 WHERE id = $1",
            row["id"],
            start + timedelta(seconds=after_s),
        )


async def _stats(stack: Stack, project: str, **request: Any) -> dict[str, history_pb2.AgentStats]:
    token = await stack.create_token(project, "member")
    history = history_pb2_grpc.HistoryServiceStub(stack.channel("history", token=token))
    reply = await history.GetAgentStats(
        history_pb2.GetAgentStatsRequest(project_id=project, **request)
    )
    return {s.agent_name: s for s in reply.stats}


def _s(duration: Any) -> float:
    return duration.ToTimedelta().total_seconds()


async def test_step_and_model_call_percentiles_per_agent(
    database_url: str, db_pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = datetime.now(UTC) - timedelta(hours=1)
    first = await f.insert_run(db_pool, project_id=P, agent_name="lat", created_at=base)
    # Step 1: a 1 s model call asking for a tool that takes 2 s; step 2: a 0.5 s answer.
    await _conversation(
        db_pool,
        first,
        base,
        [("system", 0, 0), ("user", 0, 0), ("model", 1, 1.0), ("tool", 1, 3.0), ("model", 2, 3.5)],
    )
    later = base + timedelta(minutes=1)
    second = await f.insert_run(db_pool, project_id=P, agent_name="lat", created_at=later)
    await _conversation(db_pool, second, later, [("user", 0, 0), ("model", 1, 2.0)])
    # Another project's agent of the same name, far slower: none of it may count here.
    theirs = await f.insert_run(db_pool, project_id=OTHER, agent_name="lat", created_at=later)
    await _conversation(db_pool, theirs, later, [("user", 0, 0), ("model", 1, 100.0)])
    await f.insert_run(db_pool, project_id=P, agent_name="quiet", created_at=later)

    stack = await start_stack(database_url=database_url, pool=db_pool, names=("history",))
    try:
        stats = await _stats(stack, P)
        lat = stats["lat"]
        assert lat.latency_runs == 2
        # Model calls [0.5, 1, 2]; steps [0.5, 2, 3] (percentile_cont, linear).
        assert _s(lat.p50_model_call_duration) == pytest.approx(1.0)
        assert _s(lat.p95_model_call_duration) == pytest.approx(1.9)
        assert _s(lat.p50_step_duration) == pytest.approx(2.0)
        assert _s(lat.p95_step_duration) == pytest.approx(2.9)
        # A run with no conversation: counted, nothing measured.
        quiet = stats["quiet"]
        assert quiet.latency_runs == 1
        assert not quiet.HasField("p50_step_duration")
        assert not quiet.HasField("p50_model_call_duration")

        theirs_stats = (await _stats(stack, OTHER))["lat"]
        assert _s(theirs_stats.p50_model_call_duration) == pytest.approx(100.0)

        # Bounded: past the limit only the newest runs of the window are read.
        monkeypatch.setattr(latency, "MAX_LATENCY_RUNS", 1)
        newest = (await _stats(stack, P, agent_name="lat"))["lat"]
        assert newest.latency_runs == 1
        assert _s(newest.p50_model_call_duration) == pytest.approx(2.0)
        assert newest.total_runs == 2  # the run counts are not sampled
    finally:
        await stack.close()
