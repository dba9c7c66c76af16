"""StartRun, TriggerRun and ResumeRun with a request_id used before (AIP-155), over real
gRPC on the executors of test_executor_service: the same request replays the first answer;
another request under the id is refused (INVALID_ARGUMENT naming request_id) and writes
nothing."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest

from agentfleet.gemini_stub import Call, GeminiStub, Reply, Script
from agentfleet.testing.checks.snapshots import table_rows
from agentfleet.testing.rpc_errors import assert_reused_request_id, rpc_error
from agentfleet.v1 import common_pb2, executor_pb2
from tests.integration.test_executor_service import PROJECT, Executors, define, executors, start

__all__ = ["executors"]

TABLES = ("agent_runs", "agent_run_events", "agent_run_messages", "agent_run_resume_requests")


async def snapshot(pool: asyncpg.Pool) -> dict[str, list[str]]:
    """Every row a run request could write."""
    return await table_rows(pool, TABLES)


OTHER_STARTS: list[dict[str, Any]] = [
    {"input": "something else"},
    {"max_steps": 7},
    {"timeout": {"seconds": 60}},
    {"labels": {"team": "b"}},
    {"thread_id": "t-2"},
]


@pytest.mark.parametrize("other", OTHER_STARTS)
async def test_a_start_under_a_used_request_id_asking_otherwise_is_refused(
    executors: Executors, db_pool: asyncpg.Pool, gemini_stub: GeminiStub, other: dict[str, Any]
) -> None:
    await define(db_pool, [])
    gemini_stub.add_script(Script(name="helper", replies=[Reply(text="done")]))
    first = dict(input="go", labels={"team": "a"}, request_id="r-1")
    streamed = [e async for e in executors.api.StartRun(start(**first))]
    run = streamed[-1].run_finished.run
    assert run.status == common_pb2.RUN_STATUS_COMPLETED
    before = await snapshot(db_pool)

    changed = {**first, **other}
    assert_reused_request_id(await rpc_error(executors.api.TriggerRun(start(**changed))))
    assert_reused_request_id(await rpc_error(executors.api.StartRun(start(**changed))))
    assert await snapshot(db_pool) == before

    # The same request (by either RPC, whatever the stream shows) still replays the run.
    again = await executors.api.TriggerRun(start(**first))
    assert again.id == run.id
    replayed = [e async for e in executors.api.StartRun(start(**first, include_internal=True))]
    assert replayed[-1].run_finished.run.id == run.id
    assert await snapshot(db_pool) == before


async def test_a_resume_under_a_used_request_id_asking_otherwise_is_refused(
    executors: Executors, db_pool: asyncpg.Pool, gemini_stub: GeminiStub
) -> None:
    await define(db_pool, ["echo"])
    # A tool call uses the step budget of 1, then the summary pauses the run: twice.
    call, summary = Reply(calls=[Call("echo", {"text": "a"})]), Reply(text="summary")
    gemini_stub.add_script(Script(name="helper", replies=[call, summary, call, summary]))
    first = [e async for e in executors.api.StartRun(start(max_steps=1))]
    paused = first[-1].run_finished.run
    assert paused.status == common_pb2.RUN_STATUS_PAUSED

    def resume(**fields: Any) -> executor_pb2.ResumeRunRequest:
        return executor_pb2.ResumeRunRequest(
            project_id=PROJECT, run_id=paused.id, request_id="res-1", **fields
        )

    resumed = [e async for e in executors.api.ResumeRun(resume(input="more", max_steps=1))]
    assert resumed[-1].run_finished.run.status == common_pb2.RUN_STATUS_PAUSED
    before = await snapshot(db_pool)

    # Paused again, so each of these would resume it, were it not refused.
    for other in ({"input": "other"}, {"input": "more", "max_steps": 2}, {"input": "more"}):
        assert_reused_request_id(await rpc_error(executors.api.ResumeRun(resume(**other))))
    assert await snapshot(db_pool) == before

    again = [e async for e in executors.api.ResumeRun(resume(input="more", max_steps=1))]
    assert [e.seq for e in again] == [e.seq for e in resumed]
    assert await snapshot(db_pool) == before
