"""Threads (issue #19) through gRPC on the four real services with the stub Gemini: a run
starts from the thread's previous completed run's conversation (cut to the definition's
last turns), history lists a thread's runs, and two runs of one thread never execute at
once while other runs pass them in the queue."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import asyncpg
import grpc
import pytest

from agentfleet.gemini_stub import Reply, Script, StubRequest
from agentfleet.testing.checks.invariants import assert_invariants
from agentfleet.testing.waiting import wait_for_query
from agentfleet.v1 import history_pb2
from services.executor.store import claim_sql
from tests.integration.approval_harness import PROJECT, Deployment, deployment

__all__ = ["deployment"]

CHAT_PROMPT = "You are chat."
DONE = "SELECT status = 'completed' FROM kb.agent_runs WHERE id = $1"


def chat_reply(request: StubRequest) -> Reply:
    return Reply(text=f"answer to: {request.last_user_text()}")


def _texts(request: StubRequest) -> list[str]:
    return [
        "".join(part.get("text", "") for part in content.get("parts") or [])
        for content in request.contents
    ]


async def _define_chat(deployment: Deployment, **config: object) -> None:
    deployment.stub.add_script(Script(name="chat", match_system=CHAT_PROMPT, policy=chat_reply))
    await deployment.define("chat", system_prompt=CHAT_PROMPT, config=dict(config))


async def test_a_threads_second_run_sees_the_first_runs_conversation(
    deployment: Deployment,
) -> None:
    await _define_chat(deployment)
    first = await deployment.trigger("chat", input="my name is Ada", thread_id="t-1")
    await wait_for_query(deployment.pool, DONE, first)
    second = await deployment.trigger("chat", input="what is my name?", thread_id="t-1")
    await wait_for_query(deployment.pool, DONE, second)
    unrelated = await deployment.trigger("chat", input="hello", thread_id="t-2")
    await wait_for_query(deployment.pool, DONE, unrelated)

    requests = deployment.stub.requests_for("chat")
    assert _texts(requests[1]) == [
        "my name is Ada",
        "answer to: my name is Ada",
        "what is my name?",
    ]
    assert _texts(requests[2]) == ["hello"]  # another thread starts afresh
    listed = await deployment.history().ListRuns(
        history_pb2.ListRunsRequest(project_id=PROJECT, thread_id="t-1")
    )
    assert [(r.id, r.thread_id) for r in listed.runs] == [(second, "t-1"), (first, "t-1")]
    await assert_invariants(deployment.pool, project_id=PROJECT)


async def test_the_context_policy_keeps_only_the_last_turns(deployment: Deployment) -> None:
    await _define_chat(deployment, thread={"max_turns": 1})
    for text in ("one", "two", "three"):
        run_id = await deployment.trigger("chat", input=text, thread_id="t")
        await wait_for_query(deployment.pool, DONE, run_id)
    last = deployment.stub.requests_for("chat")[-1]
    # The previous run held the turns "one" and "two"; one earlier turn is kept.
    assert _texts(last) == ["two", "answer to: two", "three"]


async def test_two_runs_of_one_thread_never_execute_at_once(deployment: Deployment) -> None:
    gate = asyncio.Event()

    async def gated(request: StubRequest) -> Reply:
        if request.last_user_text() == "slow":
            await gate.wait()
        return chat_reply(request)

    deployment.stub.add_script(Script(name="chat", match_system=CHAT_PROMPT, policy=gated))
    await deployment.define("chat", system_prompt=CHAT_PROMPT)
    first = await deployment.trigger("chat", input="slow", thread_id="t")
    await wait_for_query(
        deployment.pool, "SELECT status = 'running' FROM kb.agent_runs WHERE id = $1", first
    )
    second = await deployment.trigger("chat", input="next", thread_id="t")
    # A run queued after the second one, outside the thread, is claimed and finishes: the
    # claim went past the thread's run, which stays queued while the first executes.
    bystander = await deployment.trigger("chat", input="bystander")
    await wait_for_query(deployment.pool, DONE, bystander)
    status = await deployment.pool.fetchval(
        "SELECT status FROM kb.agent_runs WHERE id = $1", second
    )
    assert status == "queued"

    gate.set()
    await wait_for_query(deployment.pool, DONE, second)
    rows = await deployment.pool.fetch(
        "SELECT id, started_at, completed_at FROM kb.agent_runs WHERE id = ANY($1::uuid[])",
        [first, second],
    )
    times = {str(r["id"]): r for r in rows}
    assert times[second]["started_at"] >= times[first]["completed_at"]
    await assert_invariants(deployment.pool, project_id=PROJECT)


@pytest.mark.parametrize("thread_id", ["has space", "x" * 129, "slash/no"])
async def test_a_malformed_thread_id_is_invalid(deployment: Deployment, thread_id: str) -> None:
    await _define_chat(deployment)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await deployment.trigger("chat", input="hi", thread_id=thread_id)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "thread_id" in (refused.value.details() or "")
    assert await deployment.pool.fetchval("SELECT count(*) FROM kb.agent_runs") == 0


async def test_the_claims_thread_probe_is_index_backed(db_pool: asyncpg.Pool) -> None:
    """With many thread runs (a few queued or running), the claim's "is this thread busy"
    probe reads agent_runs_thread_active_idx, and nothing reads the whole table."""
    await db_pool.execute(
        """
        INSERT INTO kb.agent_runs (project_id, agent_name, status, thread_id, created_at,
                                   started_at, lease_owner, lease_expires_at)
        SELECT 'p' || (s % 5), 'chat',
               CASE WHEN s % 50 = 0 THEN 'running' WHEN s % 25 = 0 THEN 'queued'
                    ELSE 'paused' END,
               't-' || (s % 400), now() + make_interval(secs => s),
               CASE WHEN s % 50 = 0 THEN now() END,
               CASE WHEN s % 50 = 0 THEN 'w' END,
               CASE WHEN s % 50 = 0 THEN now() + interval '1 hour' END
        FROM generate_series(1, 5000) AS s
        """
    )
    await db_pool.execute("ANALYZE kb.agent_runs")
    plan = await db_pool.fetchval(
        f"EXPLAIN (FORMAT JSON) {claim_sql.CLAIM_ANY}", "worker", 30.0, 8, 64
    )
    nodes = list(_nodes(plan[0]["Plan"]))
    described = [(n["Node Type"], n.get("Relation Name"), n.get("Index Name")) for n in nodes]
    assert any(n.get("Index Name") == "agent_runs_thread_active_idx" for n in nodes), described
    # agent_runs, that is: the few claimed runs' definitions may come from a small table.
    scans = [n for n in nodes if n["Node Type"] == "Seq Scan"]
    assert not [n for n in scans if n.get("Relation Name") == "agent_runs"], [
        (n.get("Relation Name"), n.get("Filter")) for n in scans
    ]


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", ()):
        yield from _nodes(child)


BURSTS = 12
"""Bursts of three concurrent TriggerRuns on one thread. Before created_at was taken after
the enqueue lock about one burst in three ran out of order, so twelve fail all but never
(0.67**12 < 1%) while taking a few seconds."""


async def test_runs_triggered_at_once_run_in_the_order_they_were_accepted(
    deployment: Deployment,
) -> None:
    await _define_chat(deployment)
    for burst in range(BURSTS):
        thread = f"burst-{burst}"
        texts = [f"{thread} turn {i}" for i in range(3)]
        ids = await asyncio.gather(
            *(deployment.trigger("chat", input=text, thread_id=thread) for text in texts)
        )
        for run_id in ids:
            await wait_for_query(deployment.pool, DONE, run_id)
        rows = await deployment.pool.fetch(
            "SELECT id::text, input, started_at FROM kb.agent_runs "
            "WHERE project_id = $1 AND thread_id = $2 ORDER BY created_at, id",
            PROJECT,
            thread,
        )
        accepted = [r["input"] for r in rows]
        # Executed in the order accepted...
        started = [r["input"] for r in sorted(rows, key=lambda r: r["started_at"])]
        assert started == accepted, (burst, accepted, started)
        # ... each seeing every earlier turn of the thread, with its answer.
        requests = {
            r.last_user_text(): r
            for r in deployment.stub.requests_for("chat")
            if r.last_user_text() in texts
        }
        for position, text in enumerate(accepted):
            earlier = [
                line for before in accepted[:position] for line in (before, f"answer to: {before}")
            ]
            assert _texts(requests[text]) == [*earlier, text], (burst, accepted)
    await assert_invariants(deployment.pool, project_id=PROJECT)
