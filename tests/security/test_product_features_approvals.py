"""Attacks on the product features of issue #19 (approvals and threads), on the real
services with auth on and the stub Gemini.

- DecideToolCall is for admins of the run's project: a member, another project's member or
  admin, and a stolen service credential (dispatcher, executor) are refused, and nothing
  changes (the call still waits, nothing ran, no event).
- A request_id replayed with another decision is INVALID_ARGUMENT; a second decision of a
  decided call is FAILED_PRECONDITION; neither changes anything.
- A thread_id is scoped to the caller's project: another project's run in a thread of the
  same name never sees the first project's conversation.
"""

from __future__ import annotations

import grpc
import pytest

from agentfleet.gemini_stub import Reply, Script, StubRequest
from agentfleet.testing.waiting import wait_for_query
from agentfleet.v1 import executor_pb2
from tests.integration.approval_harness import (
    OTHER,
    PROJECT,
    Deployment,
    deployment,
    snapshot,
)

__all__ = ["deployment"]

APPROVE = executor_pb2.TOOL_CALL_DECISION_APPROVE
REJECT = executor_pb2.TOOL_CALL_DECISION_REJECT
ATTACKERS = ("member", "other-admin", "dispatcher")
"""A member token, a tenant-admin token (of another project) and a stolen service
credential."""


@pytest.mark.parametrize("caller", ATTACKERS)
@pytest.mark.parametrize("decision", [APPROVE, REJECT])
async def test_only_an_admin_of_the_project_decides_a_held_call(
    deployment: Deployment, caller: str, decision: int
) -> None:
    await deployment.define_clerk()
    run_id = await deployment.trigger("clerk", input="note this")
    call = await deployment.held_call(run_id)
    before = await snapshot(deployment.pool)

    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await deployment.executor(caller).DecideToolCall(
            deployment.decision(run_id, call["tool_call_id"], decision=decision, reason="x")
        )
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert await snapshot(deployment.pool) == before


@pytest.mark.parametrize("caller", ["other-admin", "other-member", "executor"])
async def test_another_projects_run_cannot_be_decided_from_ones_own_project(
    deployment: Deployment, caller: str
) -> None:
    await deployment.define_clerk()
    run_id = await deployment.trigger("clerk", input="note this")
    call = await deployment.held_call(run_id)
    before = await snapshot(deployment.pool)

    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await deployment.executor(caller).DecideToolCall(
            deployment.decision(run_id, call["tool_call_id"], decision=APPROVE, project_id=OTHER)
        )
    # Admin of OTHER: the run is not in its project. The others may not decide at all.
    expected = (
        grpc.StatusCode.NOT_FOUND
        if caller == "other-admin"
        else (grpc.StatusCode.PERMISSION_DENIED)
    )
    assert refused.value.code() == expected
    assert await snapshot(deployment.pool) == before


async def test_a_request_id_replayed_with_another_decision_is_refused(
    deployment: Deployment,
) -> None:
    await deployment.define_clerk()
    run_id = await deployment.trigger("clerk", input="note this")
    call = await deployment.held_call(run_id)
    tool_call_id = call["tool_call_id"]
    edited = {"type": "Note", "key": "approved"}
    await deployment.executor().DecideToolCall(
        deployment.decision(
            run_id, tool_call_id, decision=APPROVE, arguments=edited, request_id="d-1"
        )
    )
    await wait_for_query(
        deployment.pool, "SELECT status = 'completed' FROM kb.agent_runs WHERE id = $1", run_id
    )
    before = await snapshot(deployment.pool)

    replays = [
        {"decision": APPROVE, "arguments": {"type": "Note", "key": "other"}},
        {"decision": REJECT, "reason": "changed my mind"},
        {"decision": APPROVE},
    ]
    for replay in replays:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await deployment.executor().DecideToolCall(
                deployment.decision(run_id, tool_call_id, request_id="d-1", **replay)
            )
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "request_id" in (refused.value.details() or "")
    # A fresh request on a decided call: refused too.
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await deployment.executor().DecideToolCall(
            deployment.decision(run_id, tool_call_id, decision=REJECT, reason="late")
        )
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert await snapshot(deployment.pool) == before
    keys = await deployment.pool.fetch("SELECT key FROM kb.graph_objects WHERE type = 'Note'")
    assert [r["key"] for r in keys] == ["approved"]


@pytest.mark.parametrize("caller", ["other-member", "other-admin", "dispatcher"])
async def test_a_thread_id_never_reaches_another_projects_conversation(
    deployment: Deployment, caller: str
) -> None:
    prompt = "You are chat."

    def echo(request: StubRequest) -> Reply:
        return Reply(text=f"noted: {request.last_user_text()}")

    deployment.stub.add_script(Script(name="chat", match_system=prompt, policy=echo))
    for project in (PROJECT, OTHER):
        await deployment.define("chat", project=project, system_prompt=prompt)
    done = "SELECT status = 'completed' FROM kb.agent_runs WHERE id = $1"
    secret = await deployment.trigger("chat", input="the vault code is 4711", thread_id="shared")
    await wait_for_query(deployment.pool, done, secret)

    # Into the victim's project: refused for tenant tokens of another project, nothing
    # written. (A dispatcher credential may start runs in any project by design.)
    if caller != "dispatcher":
        before = await snapshot(deployment.pool)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await deployment.executor(caller).TriggerRun(
                executor_pb2.StartRunRequest(
                    project_id=PROJECT, agent_name="chat", input="code?", thread_id="shared"
                )
            )
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert await snapshot(deployment.pool) == before

    # The same thread name in the attacker's own project is another thread.
    run = await deployment.executor(caller).TriggerRun(
        executor_pb2.StartRunRequest(
            project_id=OTHER, agent_name="chat", input="what is the code?", thread_id="shared"
        )
    )
    await wait_for_query(deployment.pool, done, run.id)
    sent = deployment.stub.requests_for("chat")[-1]
    assert "4711" not in str(sent.contents)
    assert sent.first_user_text() == "what is the code?"
