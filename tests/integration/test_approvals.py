"""Human approval of tool calls (issue #19) through gRPC, on the four real services with
the stub Gemini: a held call waits (run WAITING, no lease, nothing executed), a decision
continues the run, a rejected call never runs and the model reads the reason, edited
arguments are checked against the tool's schema, deadlines reject or fail, CancelRun ends
a waiting run."""

from __future__ import annotations

import grpc
import pytest

from agentfleet import events
from agentfleet.gemini_stub import Call, Reply, Script, StubRequest
from agentfleet.testing.checks.invariants import assert_invariants
from agentfleet.testing.waiting import wait_for_query
from agentfleet.v1 import common_pb2, executor_pb2
from tests.integration.approval_harness import (
    HELD_ENTITY,
    PROJECT,
    Deployment,
    deployment,
    snapshot,
)

__all__ = ["deployment"]

APPROVE = executor_pb2.TOOL_CALL_DECISION_APPROVE
REJECT = executor_pb2.TOOL_CALL_DECISION_REJECT
COMPLETED = "SELECT status = 'completed' FROM kb.agent_runs WHERE id = $1"


async def _notes(deployment: Deployment) -> list[str]:
    rows = await deployment.pool.fetch(
        "SELECT key FROM kb.graph_objects WHERE project_id = $1 AND type = 'Note' ORDER BY key",
        PROJECT,
    )
    return [r["key"] for r in rows]


async def _events(deployment: Deployment, run_id: str) -> list[events.RunEvent]:
    stored = await events.read_events(
        deployment.pool, project_id=PROJECT, run_id=run_id, include_internal=True
    )
    return [e.event for e in stored]


async def test_a_held_call_waits_without_a_lease_and_runs_once_approved(
    deployment: Deployment,
) -> None:
    await deployment.define_clerk()
    run_id = await deployment.trigger("clerk", input="note this")
    call = await deployment.held_call(run_id)

    run = await deployment.pool.fetchrow("SELECT * FROM kb.agent_runs WHERE id = $1", run_id)
    assert run["lease_owner"] is None
    assert run["lease_expires_at"] is None
    assert call["tool_name"] == "create_entity"
    assert dict(call["input"]) == HELD_ENTITY
    assert await _notes(deployment) == []  # nothing executed while it waits
    found = await _events(deployment, run_id)
    safety = next(e for e in found if isinstance(e, events.Safety))
    assert safety.kind == "approval_required"
    assert safety.details["calls"][0]["tool_call_id"] == call["tool_call_id"]
    assert any(isinstance(e, events.StatusChanged) and e.to_status == "waiting" for e in found)
    await assert_invariants(deployment.pool, project_id=PROJECT)

    edited = {"type": "Note", "key": "edited-by-person"}
    reply = await deployment.executor().DecideToolCall(
        deployment.decision(
            run_id, call["tool_call_id"], decision=APPROVE, arguments=edited, request_id="r1"
        )
    )
    assert reply.status == common_pb2.TOOL_CALL_STATUS_APPROVED
    assert reply.run.status == common_pb2.RUN_STATUS_QUEUED
    assert list(reply.waiting_tool_call_ids) == []
    await wait_for_query(deployment.pool, COMPLETED, run_id)

    assert await _notes(deployment) == ["edited-by-person"]  # ran once, with the edit
    row = await deployment.pool.fetchrow(
        "SELECT status, input, original_input FROM kb.agent_run_tool_calls WHERE run_id = $1",
        run_id,
    )
    assert row["status"] == "completed"
    assert dict(row["original_input"]) == HELD_ENTITY
    assert dict(row["input"]) == edited
    found = await _events(deployment, run_id)
    responses = [e for e in found if isinstance(e, events.ToolResponse)]
    assert [r.status for r in responses] == ["completed"]
    started = [e for e in found if isinstance(e, events.RunStarted)]
    assert [s.resumed for s in started] == [False, True]
    # The same request again answers the same, and changes nothing.
    before = await snapshot(deployment.pool)
    again = await deployment.executor().DecideToolCall(
        deployment.decision(
            run_id, call["tool_call_id"], decision=APPROVE, arguments=edited, request_id="r1"
        )
    )
    assert again.status == common_pb2.TOOL_CALL_STATUS_COMPLETED
    assert await snapshot(deployment.pool) == before
    await assert_invariants(deployment.pool, project_id=PROJECT)


async def test_a_rejected_call_is_never_executed_and_the_model_reads_the_reason(
    deployment: Deployment,
) -> None:
    await deployment.define_clerk()
    run_id = await deployment.trigger("clerk", input="note this")
    call = await deployment.held_call(run_id)

    reply = await deployment.executor().DecideToolCall(
        deployment.decision(run_id, call["tool_call_id"], decision=REJECT, reason="not today")
    )
    assert reply.status == common_pb2.TOOL_CALL_STATUS_REJECTED
    await wait_for_query(deployment.pool, COMPLETED, run_id)

    assert await _notes(deployment) == []  # the side effect never happened
    response = next(
        e for e in await _events(deployment, run_id) if isinstance(e, events.ToolResponse)
    )
    assert response.status == "rejected"
    assert "not today" in response.error
    sent = deployment.stub.requests_for("clerk")[-1].function_responses()
    assert "not today" in sent[-1]["response"]["error"]
    summary = await deployment.pool.fetchval(
        "SELECT summary FROM kb.agent_runs WHERE id = $1", run_id
    )
    assert "not today" in summary
    await assert_invariants(deployment.pool, project_id=PROJECT)


async def test_edited_arguments_outside_the_tool_schema_are_refused(
    deployment: Deployment,
) -> None:
    await deployment.define_clerk()
    run_id = await deployment.trigger("clerk", input="note this")
    call = await deployment.held_call(run_id)
    before = await snapshot(deployment.pool)

    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await deployment.executor().DecideToolCall(
            deployment.decision(
                run_id, call["tool_call_id"], decision=APPROVE, arguments={"type": 5}
            )
        )
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "arguments" in (refused.value.details() or "")
    assert await snapshot(deployment.pool) == before


async def test_a_reject_without_reason_or_a_missing_decision_is_invalid(
    deployment: Deployment,
) -> None:
    await deployment.define_clerk()
    run_id = await deployment.trigger("clerk", input="note this")
    call = await deployment.held_call(run_id)
    for fields, named in (({"decision": REJECT}, "reason"), ({}, "decision")):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await deployment.executor().DecideToolCall(
                deployment.decision(run_id, call["tool_call_id"], **fields)
            )
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert named in (refused.value.details() or "")


@pytest.mark.parametrize("on_deadline", ["reject", "fail"])
async def test_the_approval_deadline_rejects_the_call_or_fails_the_run(
    deployment: Deployment, on_deadline: str
) -> None:
    rule = {"tools": ["create_*"], "deadline_s": 0.3, "on_deadline": on_deadline}
    await deployment.define_clerk({"rules": [rule]})
    run_id = await deployment.trigger("clerk", input="note this")
    expected = "completed" if on_deadline == "reject" else "failed"
    await wait_for_query(
        deployment.pool, "SELECT status = $2 FROM kb.agent_runs WHERE id = $1", run_id, expected
    )
    call = await deployment.pool.fetchrow(
        "SELECT status, decided_by FROM kb.agent_run_tool_calls WHERE run_id = $1", run_id
    )
    assert call["status"] == "rejected"
    assert await _notes(deployment) == []
    found = await _events(deployment, run_id)
    assert any(isinstance(e, events.Safety) and e.kind == "approval_deadline" for e in found)
    if on_deadline == "fail":
        error = await deployment.pool.fetchval(
            "SELECT error_message FROM kb.agent_runs WHERE id = $1", run_id
        )
        assert "approval deadline" in error
    await assert_invariants(deployment.pool, project_id=PROJECT)


async def test_a_rule_with_an_argument_match_holds_only_matching_calls(
    deployment: Deployment,
) -> None:
    rule = {"tools": ["create_entity"], "when": {"pointer": "/key", "matches": "^secret-"}}
    await deployment.define_clerk({"rules": [rule]})
    run_id = await deployment.trigger("clerk", input="note this")
    await wait_for_query(deployment.pool, COMPLETED, run_id)  # key "from-model" does not match
    assert await _notes(deployment) == ["from-model"]


async def test_cancelling_a_waiting_run_answers_its_held_call(deployment: Deployment) -> None:
    await deployment.define_clerk()
    run_id = await deployment.trigger("clerk", input="note this")
    await deployment.held_call(run_id)
    reply = await deployment.executor().CancelRun(
        executor_pb2.CancelRunRequest(project_id=PROJECT, run_id=run_id, reason="changed mind")
    )
    assert reply.run.status == common_pb2.RUN_STATUS_CANCELLED
    status = await deployment.pool.fetchval(
        "SELECT status FROM kb.agent_run_tool_calls WHERE run_id = $1", run_id
    )
    assert status == "rejected"
    assert await _notes(deployment) == []
    await assert_invariants(deployment.pool, project_id=PROJECT)


async def test_a_child_waiting_for_approval_keeps_its_parent_waiting(
    deployment: Deployment,
) -> None:
    await deployment.define_clerk()
    prompt = "You are boss."

    def boss(request: StubRequest) -> Reply:
        responses = request.function_responses()
        if not responses:
            task = {"agent_name": "clerk", "description": "note", "prompt": "note this"}
            return Reply(calls=[Call("spawn_agents", {"tasks": [task]})])
        return Reply(text=f"boss done: {responses[-1]['response']}")

    deployment.stub.add_script(Script(name="boss", match_system=prompt, policy=boss))
    await deployment.define("boss", system_prompt=prompt, tools=["spawn_agents"])
    parent = await deployment.trigger("boss", input="get it noted")
    await wait_for_query(
        deployment.pool,
        "SELECT status = 'waiting' FROM kb.agent_runs WHERE parent_run_id = $1",
        parent,
    )
    child = await deployment.pool.fetchval(
        "SELECT id::text FROM kb.agent_runs WHERE parent_run_id = $1", parent
    )
    call = await deployment.held_call(child)
    assert (
        await deployment.pool.fetchval("SELECT status FROM kb.agent_runs WHERE id = $1", parent)
        == "running"
    )

    await deployment.executor().DecideToolCall(
        deployment.decision(child, call["tool_call_id"], decision=APPROVE)
    )
    await wait_for_query(deployment.pool, COMPLETED, parent)
    assert await _notes(deployment) == ["from-model"]
    summary = await deployment.pool.fetchval(
        "SELECT summary FROM kb.agent_runs WHERE id = $1", parent
    )
    assert "completed" in summary
    await assert_invariants(deployment.pool, project_id=PROJECT)
