"""GetAgentStats' latency figures across tenants (issue 34, item 4): they come from the
caller's project's runs only (another project's agent of the same name, however slow, moves
none of them), and another project's token reads none of them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg
import grpc
import pytest

from agentfleet.testing import factories as f
from agentfleet.testing.services import start_stack
from agentfleet.v1 import history_pb2, history_pb2_grpc
from tests.integration.test_agent_latency import _conversation

VICTIM, INTRUDER = "lat-victim", "lat-intruder"


async def test_latency_is_the_callers_projects_own(
    database_url: str, db_pool: asyncpg.Pool
) -> None:
    start = datetime.now(UTC) - timedelta(minutes=30)
    victim = await f.insert_run(db_pool, project_id=VICTIM, agent_name="shared", created_at=start)
    await _conversation(db_pool, victim, start, [("user", 0, 0), ("model", 1, 42.0)])
    mine = await f.insert_run(db_pool, project_id=INTRUDER, agent_name="shared", created_at=start)
    await _conversation(db_pool, mine, start, [("user", 0, 0), ("model", 1, 0.25)])
    stack = await start_stack(database_url=database_url, pool=db_pool, names=("history",))
    try:
        token = await stack.create_token(INTRUDER, "member")
        history = history_pb2_grpc.HistoryServiceStub(stack.channel("history", token=token))
        (own,) = (
            await history.GetAgentStats(history_pb2.GetAgentStatsRequest(project_id=INTRUDER))
        ).stats
        assert own.latency_runs == 1
        assert own.p95_model_call_duration.ToTimedelta() == timedelta(seconds=0.25)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await history.GetAgentStats(
                history_pb2.GetAgentStatsRequest(project_id=VICTIM, agent_name="shared")
            )
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "42" not in (refused.value.details() or "")
    finally:
        await stack.close()
