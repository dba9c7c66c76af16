"""Remote A2A children in one process (all four services in-process, auth on, the stub
model), where the test can read the spans: the remote call's CLIENT span in the parent's
trace, the remote state changes without text recorded as REMOTE_STATUS, and a remote task
that asks for input answered on the same task -- by the parent (spawn_agents' resume_run_id)
and by a user (ResumeRun). The remote agent is :mod:`agentfleet.testing.a2a_remote`
(a2a-sdk server classes). The same on real processes: tests/e2e/test_a2a_remote.py."""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from agentfleet import events
from agentfleet.gemini_stub import Call, GeminiStub, Reply, Script, StubRequest
from agentfleet.testing.a2a_remote import RemoteAgentServer
from agentfleet.testing.services import Stack
from agentfleet.testing.waiting import wait_for, wait_for_query
from agentfleet.v1 import (
    common_pb2,
    executor_pb2,
    executor_pb2_grpc,
    registry_pb2,
    registry_pb2_grpc,
)

Policy = Any
TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}")


@pytest.fixture
async def remote() -> AsyncIterator[RemoteAgentServer]:
    async with RemoteAgentServer().serve() as server:
        yield server


class Tenant:
    """One project with remote agent "echo" registered and a coordinator "boss"."""

    def __init__(self, stack: Stack, stub: GeminiStub, token: str, project_id: str) -> None:
        self.stack, self.stub, self.token, self.project_id = stack, stub, token, project_id
        self.registry = registry_pb2_grpc.AgentRegistryServiceStub(
            stack.channel("executor", token=token)
        )
        self.executor = executor_pb2_grpc.ExecutorServiceStub(
            stack.channel("executor", token=token)
        )

    @classmethod
    async def create(cls, stack: Stack, stub: GeminiStub, remote: RemoteAgentServer) -> Tenant:
        project_id = f"remote-in-{uuid.uuid4().hex[:8]}"
        tenant = cls(stack, stub, await stack.create_token(project_id, "admin"), project_id)
        await tenant.registry.UpsertRemoteAgent(
            registry_pb2.UpsertRemoteAgentRequest(
                project_id=project_id,
                remote_agent=registry_pb2.RemoteAgent(name="echo", card_url=remote.card_url),
            )
        )
        return tenant

    async def coordinate(self, policy: Policy) -> str:
        """Starts "boss", whose model is ``policy``; the root run's id."""
        marker = f"[{self.project_id}]"
        self.stub.add_script(Script(name=marker, match_system=marker, policy=policy))
        await self.registry.UpsertAgentDefinition(
            registry_pb2.UpsertAgentDefinitionRequest(
                project_id=self.project_id,
                agent_definition=common_pb2.AgentDefinition(
                    name="boss",
                    system_prompt=f"boss {marker}",
                    model=common_pb2.ModelConfig(name="gemini-e2e"),
                    tools=["spawn_agents"],
                ),
            )
        )
        root = await self.executor.TriggerRun(
            executor_pb2.StartRunRequest(project_id=self.project_id, agent_name="boss", input="go")
        )
        return root.id

    async def ended(self, pool: asyncpg.Pool, run_id: str) -> asyncpg.Record:
        await wait_for_query(
            pool,
            "SELECT status IN ('completed', 'failed', 'cancelled', 'paused')"
            " FROM kb.agent_runs WHERE id = $1::uuid",
            run_id,
            what=f"run {run_id} to stop",
        )
        return await pool.fetchrow("SELECT * FROM kb.agent_runs WHERE id = $1::uuid", run_id)

    async def child(self, pool: asyncpg.Pool, root: str) -> asyncpg.Record:
        child_id = await wait_for(
            lambda: pool.fetchval(
                "SELECT id::text FROM kb.agent_runs WHERE parent_run_id = $1::uuid", root
            ),
            "the remote child",
        )
        return await self.ended(pool, child_id)

    async def events(self, pool: asyncpg.Pool, run_id: str) -> list[events.RunEvent]:
        stored = await events.read_events(
            pool, project_id=self.project_id, run_id=run_id, include_internal=True
        )
        return [e.event for e in stored]


def spawn(*tasks: dict[str, Any]) -> Reply:
    return Reply(calls=[Call("spawn_agents", {"tasks": list(tasks)})])


def spawn_output(request: StubRequest) -> dict[str, Any]:
    return request.function_responses()[-1]["response"]["output"]


def states(recorded: list[events.RunEvent]) -> list[str]:
    return [e.state for e in recorded if isinstance(e, events.RemoteStatus)]


async def test_the_remote_call_is_a_client_span_in_the_parents_trace(
    stub_stack: Stack,
    gemini_stub: GeminiStub,
    db_pool: asyncpg.Pool,
    remote: RemoteAgentServer,
    spans: InMemorySpanExporter,
) -> None:
    tenant = await Tenant.create(stub_stack, gemini_stub, remote)

    def boss(request: StubRequest) -> Reply:
        if request.turn == 0:
            return spawn({"agent_name": "echo", "prompt": "answer traced"})
        return Reply(text="Done.")

    root = await tenant.coordinate(boss)
    child = await tenant.child(db_pool, root)
    assert child["status"] == "completed", child["error_message"]
    parent = await tenant.ended(db_pool, root)
    trace_id = int(parent["trace_id"], 16)

    # The span ends after the child's final row is written: wait for it, not for the row.
    name = "invoke_agent echo"
    span = await wait_for(
        lambda: next((s for s in spans.get_finished_spans() if s.name == name), None),
        f"the span {name!r}",
    )
    assert span.kind == SpanKind.CLIENT
    assert span.context.trace_id == trace_id
    assert span.attributes["agentfleet.remote_agent.card_url"] == remote.card_url
    assert span.attributes["agentfleet.run_id"] == str(child["id"])
    finished = spans.get_finished_spans()
    spawn_span = next(s for s in finished if s.name == "execute_tool spawn_agents")
    assert span.parent is not None
    assert span.parent.span_id == spawn_span.context.span_id
    assert spawn_span.context.trace_id == trace_id

    # The remote agent received the traceparent of that trace, from a span within this one.
    received = [h["traceparent"] for h in remote.seen_headers["/agent/"] if "traceparent" in h]
    assert received
    below = {span.context.span_id} | {
        s.context.span_id for s in finished if s.parent and s.parent.span_id == span.context.span_id
    }
    for header in received:
        match = TRACEPARENT.fullmatch(header)
        assert match is not None, header
        assert int(match.group(1), 16) == trace_id
        assert int(match.group(2), 16) in below, header


async def test_remote_state_changes_without_text_are_events(
    stub_stack: Stack, gemini_stub: GeminiStub, db_pool: asyncpg.Pool, remote: RemoteAgentServer
) -> None:
    tenant = await Tenant.create(stub_stack, gemini_stub, remote)

    def boss(request: StubRequest) -> Reply:
        if request.turn == 0:
            return spawn({"agent_name": "echo", "prompt": "quiet"})
        return Reply(text="Done.")

    child = await tenant.child(db_pool, await tenant.coordinate(boss))
    assert child["status"] == "completed", child["error_message"]
    assert child["summary"] == "quietly done"
    recorded = await tenant.events(db_pool, str(child["id"]))
    assert states(recorded) == ["submitted", "working", "completed"]
    task_id = child["remote_agent"]["task_id"]
    assert {e.task_id for e in recorded if isinstance(e, events.RemoteStatus)} == {task_id}
    # None of those updates had text: no MODEL_TEXT but the answer's.
    assert [e.text for e in recorded if isinstance(e, events.ModelText)] == ["quietly done"]


async def test_the_parent_answers_a_remote_task_that_asks_for_input(
    stub_stack: Stack, gemini_stub: GeminiStub, db_pool: asyncpg.Pool, remote: RemoteAgentServer
) -> None:
    tenant = await Tenant.create(stub_stack, gemini_stub, remote)
    outputs: list[dict[str, Any]] = []

    def boss(request: StubRequest) -> Reply:
        if request.turn == 0:
            return spawn({"agent_name": "echo", "prompt": "ask"})
        outputs.append(spawn_output(request))
        if request.turn == 1:
            (paused,) = outputs[0]["results"]
            return spawn(
                {
                    "agent_name": "echo",
                    "prompt": "the blue one",
                    "resume_run_id": paused["run_id"],
                }
            )
        return Reply(text="Done.")

    root = await tenant.coordinate(boss)
    parent = await tenant.ended(db_pool, root)
    assert parent["status"] == "completed", parent["error_message"]
    asked, answered = outputs
    (paused,) = asked["results"]
    assert paused["status"] == "paused"
    assert paused["summary"] == "the remote agent asks for input: which one?"
    (done,) = answered["results"]
    assert (done["run_id"], done["status"]) == (paused["run_id"], "completed")
    assert done["summary"] == "you chose the blue one"

    child = await tenant.ended(db_pool, paused["run_id"])
    assert child["resume_count"] == 1
    # Both messages went to one remote task, in its context.
    task_id, context_id = child["remote_agent"]["task_id"], child["remote_agent"]["context_id"]
    assert [m for m in remote.messages if m[0] == task_id] == [
        (task_id, context_id, "ask"),
        (task_id, context_id, "the blue one"),
    ]
    recorded = await tenant.events(db_pool, str(child["id"]))
    found = states(recorded)
    assert found[:2] == ["submitted", "input_required"]
    assert found[-1] == "completed"
    changes = [
        (e.from_status, e.to_status) for e in recorded if isinstance(e, events.StatusChanged)
    ]
    assert changes == [
        ("queued", "running"),
        ("running", "paused"),
        ("paused", "running"),
        ("running", "completed"),
    ]
    started = [e for e in recorded if isinstance(e, events.RunStarted)]
    assert [(e.recovered, e.resumed) for e in started] == [(False, False), (False, True)]


async def test_a_user_answers_a_paused_remote_child_with_resume_run(
    stub_stack: Stack, gemini_stub: GeminiStub, db_pool: asyncpg.Pool, remote: RemoteAgentServer
) -> None:
    tenant = await Tenant.create(stub_stack, gemini_stub, remote)

    def boss(request: StubRequest) -> Reply:
        if request.turn == 0:
            return spawn({"agent_name": "echo", "prompt": "ask"})
        return Reply(text="Asked the user.")

    root = await tenant.coordinate(boss)
    child = await tenant.child(db_pool, root)
    assert child["status"] == "paused"
    assert child["summary"] == "the remote agent asks for input: which one?"
    assert (await tenant.ended(db_pool, root))["status"] == "completed"

    streamed = [
        e
        async for e in tenant.executor.ResumeRun(
            executor_pb2.ResumeRunRequest(
                project_id=tenant.project_id, run_id=str(child["id"]), input="the red one"
            )
        )
    ]
    finished = [e for e in streamed if e.type == common_pb2.RUN_EVENT_TYPE_RUN_FINISHED]
    assert finished[-1].run_finished.run.status == common_pb2.RUN_STATUS_COMPLETED
    assert finished[-1].run_finished.run.summary == "you chose the red one"
    assert "input_required" not in [
        e.remote_status.state for e in streamed if e.type == common_pb2.RUN_EVENT_TYPE_REMOTE_STATUS
    ]
    task_id = child["remote_agent"]["task_id"]
    assert [m[2] for m in remote.messages if m[0] == task_id] == ["ask", "the red one"]


async def test_a_flow_whose_remote_member_asks_for_input_ends_saying_what_was_asked(
    stub_stack: Stack, gemini_stub: GeminiStub, db_pool: asyncpg.Pool, remote: RemoteAgentServer
) -> None:
    """A flow has no model to answer with: it fails naming the paused member and its
    question; the member stays paused, answerable by a user."""
    tenant = await Tenant.create(stub_stack, gemini_stub, remote)
    await tenant.registry.UpsertAgentDefinition(
        registry_pb2.UpsertAgentDefinitionRequest(
            project_id=tenant.project_id,
            agent_definition=common_pb2.AgentDefinition(
                name="pipeline",
                flow_type=common_pb2.FLOW_TYPE_SEQUENTIAL,
                sub_agents=["echo"],
                model=common_pb2.ModelConfig(name="gemini-e2e"),
            ),
        )
    )
    run = await tenant.executor.TriggerRun(
        executor_pb2.StartRunRequest(
            project_id=tenant.project_id, agent_name="pipeline", input="ask"
        )
    )
    flow = await tenant.ended(db_pool, run.id)
    member = await tenant.child(db_pool, run.id)
    assert member["status"] == "paused"
    assert flow["status"] == "failed"
    assert flow["error_message"] == (
        f"member 'echo' (run {member['id']}) ended paused: "
        "the remote agent asks for input: which one?"
    )


async def test_cancelling_a_child_paused_for_input_cancels_its_remote_task(
    stub_stack: Stack, gemini_stub: GeminiStub, db_pool: asyncpg.Pool, remote: RemoteAgentServer
) -> None:
    """No execution holds a paused child's connection: the cancel hands it to one, which
    sends tasks/cancel to the remote task, then records CANCELLED."""
    tenant = await Tenant.create(stub_stack, gemini_stub, remote)

    def boss(request: StubRequest) -> Reply:
        if request.turn == 0:
            return spawn({"agent_name": "echo", "prompt": "ask"})
        return Reply(text="Asked.")

    root = await tenant.coordinate(boss)
    child = await tenant.child(db_pool, root)
    assert child["status"] == "paused"
    assert (await tenant.ended(db_pool, root))["status"] == "completed"
    task_id = child["remote_agent"]["task_id"]

    # Through the tree: the ended root's paused descendant.
    await tenant.executor.CancelRun(
        executor_pb2.CancelRunRequest(project_id=tenant.project_id, run_id=root)
    )
    await wait_for_query(
        db_pool,
        "SELECT status = 'cancelled' FROM kb.agent_runs WHERE id = $1",
        child["id"],
        what="the paused child cancelled",
    )
    assert task_id in remote.cancelled
    recorded = await tenant.events(db_pool, str(child["id"]))
    changes = [
        (e.from_status, e.to_status, e.reason)
        for e in recorded
        if isinstance(e, events.StatusChanged)
    ][-2:]
    reason = "ancestor cancelled: cancelled by user"
    assert changes == [
        ("paused", "running", f"cancelling its remote task: {reason}"),
        ("running", "cancelled", reason),
    ]
    # Nothing was sent to the remote task but the cancel.
    assert [m[2] for m in remote.messages if m[0] == task_id] == ["ask"]
