"""The hybrid coordinator's failure triage (seed 002 v4, issue 37 item 5), on the four
services with the stub model: for a graph created with ``llm_triage`` the triage model
decides, per failed attempt, between retrying with advice, reassigning to another agent and
escalating (the task and its graph pause, shown by WatchTaskGraph, until RetryTask); each
decision and its reason is on the session. A graph without it retries mechanically."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from agentfleet.gemini_stub import GeminiStub, Reply, Script, StubRequest
from agentfleet.testing.services import Stack
from agentfleet.v1 import dispatcher_pb2 as pb
from tests.integration.test_dispatcher_control import define, sessions_of
from tests.integration.test_dispatcher_selection import stack_on_stub
from tests.integration.test_dispatcher_service import PROJECT, client, first_user_text, wait_graph

TRIAGE_MODEL = "triage-model"
ADVICE = "read the inputs before writing"


@pytest.fixture
async def triaging_stack(
    database_url: str, db_pool: asyncpg.Pool, gemini_stub: GeminiStub
) -> AsyncIterator[Stack]:
    async with stack_on_stub(
        database_url, db_pool, gemini_stub, AGENTFLEET_DISPATCHER_TRIAGE_MODEL=TRIAGE_MODEL
    ) as running:
        yield running


def triage(request: StubRequest) -> Reply:
    prompt = first_user_text(request)
    if "Agent that failed: coder" in prompt:
        answer = {"decision": "retry", "reason": "a slip", "advice": ADVICE}
    elif "Agent that failed: weak" in prompt:
        answer = {"decision": "reassign", "reason": "needs more skill", "agent": "strong"}
    else:
        answer = {"decision": "escalate", "reason": "the credentials are missing"}
    return Reply(text=json.dumps(answer))


async def test_failed_tasks_are_retried_reassigned_or_escalated(
    triaging_stack: Stack, db_pool: asyncpg.Pool, gemini_stub: GeminiStub
) -> None:
    await triage_scenario(await client(triaging_stack), db_pool, gemini_stub)


async def triage_scenario(api: Any, db_pool: asyncpg.Pool, gemini_stub: GeminiStub) -> None:
    """Three tasks of a triaged graph, each failing once: one retried with advice, one
    reassigned, one escalated and then resumed by RetryTask. Also run on real processes
    (tests/e2e/test_dispatcher_triage_processes.py)."""
    for name in ("coder", "weak", "strong", "lost"):
        await define(db_pool, name)
    fixed = asyncio.Event()
    failing = Reply(error_status=400, error_message="the request was refused")
    gemini_stub.add_script(Script(name="triage", match_model=TRIAGE_MODEL, policy=triage))
    gemini_stub.add_script(
        Script(
            name="coder",
            match_system="You are coder",
            policy=lambda r: Reply(text="coded") if ADVICE in first_user_text(r) else failing,
        )
    )
    gemini_stub.add_script(
        Script(name="weak", match_system="You are weak", policy=lambda r: failing)
    )
    gemini_stub.add_script(
        Script(name="strong", match_system="You are strong", policy=lambda r: Reply(text="strong"))
    )
    gemini_stub.add_script(
        Script(
            name="lost",
            match_system="You are lost",
            policy=lambda r: Reply(text="found") if fixed.is_set() else failing,
        )
    )
    created = await api.CreateTaskGraph(
        pb.CreateTaskGraphRequest(
            project_id=PROJECT,
            llm_triage=True,
            tasks=[
                pb.TaskSpec(key="a", title="a", assigned_agent="coder"),
                pb.TaskSpec(key="b", title="b", assigned_agent="weak"),
                pb.TaskSpec(key="c", title="c", assigned_agent="lost"),
            ],
        )
    )
    assert created.task_graph.llm_triage
    graph_id = created.task_graph.id
    escalations: list[pb.TaskEvent] = []
    graph_statuses: list[int] = []
    async with asyncio.timeout(30):
        async for event in api.WatchTaskGraph(
            pb.WatchTaskGraphRequest(project_id=PROJECT, task_graph_id=graph_id)
        ):
            if event.type == pb.TASK_EVENT_TYPE_GRAPH_STATUS_CHANGED:
                graph_statuses.append(event.graph_status)
            elif event.task.spec.key == "c" and event.task.status == pb.TASK_STATUS_PAUSED:
                escalations.append(event)
    graph = (
        await api.GetTaskGraph(pb.GetTaskGraphRequest(project_id=PROJECT, task_graph_id=graph_id))
    ).task_graph
    assert graph.status == pb.TASK_GRAPH_STATUS_PAUSED
    # The escalation is visible to whoever watches the graph: the task paused with why, the
    # session's decision, and the graph paused once nothing else of it can run.
    (escalation,) = escalations
    assert escalation.task.error_message.startswith("escalated for a person:")
    assert escalation.task.escalated
    assert escalation.session.triage_decision == "escalate"
    assert graph_statuses[-1] == pb.TASK_GRAPH_STATUS_PAUSED
    tasks = {t.spec.key: t for t in graph.tasks}

    # Retried with the triage's advice in the next prompt.
    first, second = await sessions_of(api, tasks["a"].id)
    assert (first.triage_decision, first.triage_reason) == ("retry", "a slip")
    assert first.outcome == pb.SESSION_OUTCOME_FAILED
    assert second.outcome == pb.SESSION_OUTCOME_COMPLETED
    assert ADVICE in first_user_text(gemini_stub.requests_for("coder")[-1])
    # Reassigned: the next attempt is another agent's.
    first, second = await sessions_of(api, tasks["b"].id)
    assert first.triage_decision == "reassign"
    assert first.triage_reason == "strong: needs more skill"
    assert (first.agent_name, second.agent_name) == ("weak", "strong")
    assert tasks["b"].status == pb.TASK_STATUS_COMPLETED
    # Escalated: no new attempt; the task waits for a person, who resumes it.
    (escalated,) = await sessions_of(api, tasks["c"].id)
    assert escalated.triage_decision == "escalate"
    assert escalated.triage_reason == "the credentials are missing"
    assert tasks["c"].status == pb.TASK_STATUS_PAUSED
    assert tasks["c"].error_message.startswith(
        "escalated for a person: the credentials are missing; the attempt failed with:"
    )
    fixed.set()
    await api.RetryTask(pb.RetryTaskRequest(project_id=PROJECT, task_id=tasks["c"].id))
    graph = await wait_graph(api, graph_id)
    assert graph.status == pb.TASK_GRAPH_STATUS_COMPLETED
    assert not graph.tasks[[t.spec.key for t in graph.tasks].index("c")].escalated
    resumed = first_user_text(gemini_stub.requests_for("lost")[-1])
    assert "escalated for a person: the credentials are missing" in resumed


async def test_graphs_without_triage_retry_mechanically(
    triaging_stack: Stack, db_pool: asyncpg.Pool, gemini_stub: GeminiStub
) -> None:
    await define(db_pool, "weak")
    gemini_stub.add_script(Script(name="triage", match_model=TRIAGE_MODEL, policy=triage))
    gemini_stub.add_script(
        Script(name="weak", match_system="You are weak", policy=lambda r: Reply(error_status=400))
    )
    api = await client(triaging_stack)
    created = await api.CreateTaskGraph(
        pb.CreateTaskGraphRequest(
            project_id=PROJECT,
            tasks=[pb.TaskSpec(key="d", title="d", assigned_agent="weak", max_retries=1)],
        )
    )
    graph = await wait_graph(api, created.task_graph.id)
    assert graph.status == pb.TASK_GRAPH_STATUS_FAILED
    sessions = await sessions_of(api, graph.tasks[0].id)
    assert [(s.agent_name, s.triage_decision) for s in sessions] == [("weak", ""), ("weak", "")]
    assert gemini_stub.used("triage") == 0
