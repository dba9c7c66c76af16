"""Internal events across real processes (issue 37, item 3): an executor process stores a
doom-loop warning and a routing lookup as internal; a history process hides them from
WatchRun and ListRunToolCalls unless asked, and the default stream is the full one minus
exactly those events."""

from __future__ import annotations

import asyncio
import uuid

from agentfleet.gemini_stub import Call, Reply, Script, StubRequest
from agentfleet.testing.waiting import wait_for_query
from agentfleet.v1 import common_pb2, executor_pb2, history_pb2
from tests.e2e.conftest import Fleet


def _looper(request: StubRequest) -> Reply:
    if request.turn == 0:
        return Reply(thought="Whom can I ask?", calls=[Call("list_available_agents")])
    if 1 <= request.turn <= 3:
        return Reply(calls=[Call("list_entities", {"type": "Note"})])
    return Reply(text="done looking")


async def test_a_history_process_hides_what_an_executor_stored_internal(fleet: Fleet) -> None:
    project = await fleet.project("internal")
    marker = uuid.uuid4().hex[:8]
    await project.define(
        "looper", system_prompt=f"loop {marker}", tools=["list_entities", "list_available_agents"]
    )
    fleet.stub.add_script(Script(name=f"looper-{marker}", match_system=marker, policy=_looper))
    run = await project.executor("executor-b").TriggerRun(
        executor_pb2.StartRunRequest(
            project_id=project.project_id, agent_name="looper", input="look"
        )
    )
    await wait_for_query(
        fleet.pool, "SELECT status = 'completed' FROM kb.agent_runs WHERE id = $1", run.id
    )
    history = project.history("history-b")

    async def watch(include_internal: bool) -> list[common_pb2.RunEvent]:
        request = history_pb2.WatchRunRequest(
            project_id=project.project_id, run_id=run.id, include_internal=include_internal
        )
        async with asyncio.timeout(20):
            return [e async for e in history.WatchRun(request)]

    shown, everything = await watch(False), await watch(True)
    hidden = [e for e in everything if e.is_internal]
    assert [e.type for e in hidden] == [
        common_pb2.RUN_EVENT_TYPE_TOOL_REQUEST,
        common_pb2.RUN_EVENT_TYPE_TOOL_RESPONSE,
        common_pb2.RUN_EVENT_TYPE_SAFETY,
    ]
    assert hidden[-1].safety.kind == common_pb2.SAFETY_KIND_DOOM_LOOP_WARNING
    assert shown == [e for e in everything if not e.is_internal]
    assert [e.seq for e in everything] == list(range(1, len(everything) + 1))
    assert any(e.HasField("model_text") and e.model_text.thought for e in shown)
    calls = await history.ListRunToolCalls(
        history_pb2.ListRunToolCallsRequest(project_id=project.project_id, run_id=run.id)
    )
    assert "list_available_agents" not in {c.tool_name for c in calls.tool_calls}
