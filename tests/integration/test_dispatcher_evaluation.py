"""The optional LLM evaluation of task outputs (AGENTFLEET_DISPATCHER_EVALUATOR_MODEL): a
rejected output sends the task back with the feedback in its next prompt; an accepted one
completes it; with no retry left, or when the evaluator fails, the output stands."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import asyncpg
import pytest

from agentfleet.gemini_stub import GeminiStub, Reply, Script, StubRequest
from agentfleet.testing.services import Stack
from agentfleet.v1 import dispatcher_pb2 as pb
from tests.integration.test_dispatcher_control import define, sessions_of
from tests.integration.test_dispatcher_selection import stack_on_stub
from tests.integration.test_dispatcher_service import PROJECT, client, first_user_text, wait_graph

EVALUATOR_MODEL = "evaluator-model"


@pytest.fixture
async def evaluating_stack(
    database_url: str, db_pool: asyncpg.Pool, gemini_stub: GeminiStub
) -> AsyncIterator[Stack]:
    async with stack_on_stub(
        database_url, db_pool, gemini_stub, AGENTFLEET_DISPATCHER_EVALUATOR_MODEL=EVALUATOR_MODEL
    ) as running:
        yield running


def writer(request: StubRequest) -> Reply:
    """Writes a draft; once the prompt carries the evaluator's feedback, a final text."""
    prompt = first_user_text(request)
    return Reply(text="final text with sources" if "add sources" in prompt else "a draft")


def evaluator(request: StubRequest) -> Reply:
    output = first_user_text(request)
    if "Task: broken" in output:
        return Reply(text="not json at all")
    if "Task: stubborn" in output:
        return Reply(text=json.dumps({"verdict": "retry", "feedback": "never good enough"}))
    if "final text with sources" in output:
        return Reply(text=json.dumps({"verdict": "accept"}))
    return Reply(text=json.dumps({"verdict": "retry", "feedback": "add sources"}))


async def test_rejected_outputs_are_retried_with_the_feedback(
    evaluating_stack: Stack, db_pool: asyncpg.Pool, gemini_stub: GeminiStub
) -> None:
    await define(db_pool, "writer")
    gemini_stub.add_script(Script(name="evaluator", match_model=EVALUATOR_MODEL, policy=evaluator))
    gemini_stub.add_script(Script(name="writer", match_system="You are writer", policy=writer))
    api = await client(evaluating_stack)
    specs = [
        pb.TaskSpec(key="report", title="report", assigned_agent="writer"),
        pb.TaskSpec(key="stubborn", title="stubborn", assigned_agent="writer", max_retries=1),
        pb.TaskSpec(key="broken", title="broken", assigned_agent="writer"),
    ]
    created = await api.CreateTaskGraph(pb.CreateTaskGraphRequest(project_id=PROJECT, tasks=specs))
    graph = await wait_graph(api, created.task_graph.id)
    tasks = {t.spec.key: t for t in graph.tasks}
    assert {k: t.status for k, t in tasks.items()} == dict.fromkeys(tasks, pb.TASK_STATUS_COMPLETED)

    # Rejected once, then accepted: two sessions, the second prompt carries the feedback.
    report = await sessions_of(api, tasks["report"].id)
    assert len(report) == 2
    assert "add sources" in report[0].error_message
    assert tasks["report"].summary == "final text with sources"
    writer_prompts = [first_user_text(r) for r in gemini_stub.requests_for("writer")]
    assert any("add sources" in p for p in writer_prompts)

    # Rejected every time: after its one retry the last output stands.
    assert len(await sessions_of(api, tasks["stubborn"].id)) == 2
    # The evaluator's answer is unusable: the output is accepted at once.
    assert len(await sessions_of(api, tasks["broken"].id)) == 1
