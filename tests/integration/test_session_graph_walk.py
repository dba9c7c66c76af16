"""Seed 002's audit trail as a test: "why did this task go wrong?" answered from the graph
alone. From a SpecTask, the built-in graph tools follow ``has_session`` to its attempts,
``follows_up`` from the retry to the failed attempt, and ``has_message`` to each attempt's
conversation, and read the exact prompt and reply of both (issue 37, item 4)."""

from __future__ import annotations

import json
from typing import Any

import asyncpg
import pytest

from agentfleet.gemini_stub import GeminiStub, Reply, Script, StubRequest
from agentfleet.testing.services import Stack
from agentfleet.v1 import dispatcher_pb2 as pb
from services.toolpool.builtin import ToolContext, ToolError, call_builtin
from tests.integration.test_builtin_tools import agent_run
from tests.integration.test_dispatcher_control import define, sessions_of
from tests.integration.test_dispatcher_service import PROJECT, client, first_user_text, wait_graph

SCHEMA = {"type": "object", "properties": {"done": {"type": "boolean"}}, "required": ["done"]}
WRONG = "I would rather describe it in prose."
RIGHT = json.dumps({"done": True})


def builder(request: StubRequest) -> Reply:
    """Answers in prose (not the schema: the run fails) until told the previous attempt
    failed."""
    return Reply(text=RIGHT if "Previous attempt failed" in first_user_text(request) else WRONG)


async def related(ctx: ToolContext, entity_id: str, kind: str) -> list[dict[str, Any]]:
    result = await call_builtin(ctx, "get_related", {"id": entity_id, "type": kind})
    return result["related"]


async def conversation(ctx: ToolContext, session_id: str) -> list[dict[str, Any]]:
    """The session's messages in their order, as the graph tools give them."""
    edges = await related(ctx, session_id, "has_message")
    ordered = sorted(edges, key=lambda r: r["relationship"]["properties"]["sequence"])
    messages = [r["entity"]["properties"] for r in ordered]
    assert [m["sequence"] for m in messages] == list(range(1, len(messages) + 1))
    return messages


async def test_a_failed_attempt_and_its_retry_read_from_the_graph(
    stub_stack: Stack, db_pool: asyncpg.Pool, gemini_stub: GeminiStub
) -> None:
    await define(db_pool, "builder", output_schema=SCHEMA)
    gemini_stub.add_script(Script(name="builder", match_system="You are builder", policy=builder))
    api = await client(stub_stack)
    created = await api.CreateTaskGraph(
        pb.CreateTaskGraphRequest(
            project_id=PROJECT,
            tasks=[pb.TaskSpec(key="3.2", title="implement tagging", assigned_agent="builder")],
        )
    )
    graph = await wait_graph(api, created.task_graph.id)
    (task,) = graph.tasks
    assert task.status == pb.TASK_STATUS_COMPLETED
    prompts = [first_user_text(r) for r in gemini_stub.requests_for("builder")]

    # An agent reading the graph: any run of the project with the built-in tools.
    ctx = ToolContext(project_id=PROJECT, run_id=await agent_run(db_pool, PROJECT), pool=db_pool)
    sessions = {
        r["entity"]["properties"]["status"]: r["entity"]
        for r in await related(ctx, task.id, "has_session")
    }
    assert set(sessions) == {"failed", "completed"}
    failed, retry = sessions["failed"], sessions["completed"]
    (previous,) = await related(ctx, retry["id"], "follows_up")
    assert previous["entity"]["id"] == failed["id"]

    first = await conversation(ctx, failed["id"])
    assert failed["properties"]["message_count"] == len(first)
    assert failed["properties"]["tokens_in"] > 0
    assert failed["properties"]["tokens_out"] > 0
    # As seed 002 draws it: system, user, assistant, ... in sequence.
    assert [m["role"] for m in first[:3]] == ["system", "user", "assistant"]
    assert first[0]["content"] == "You are builder."
    assert first[1]["content"] == prompts[0] == failed["properties"]["input"]
    assert first[2]["content"] == WRONG
    assert failed["properties"]["error_message"]  # why it failed, beside what was said

    second = await conversation(ctx, retry["id"])
    assert [m["role"] for m in second] == ["system", "user", "assistant"]
    assert second[1]["content"] == retry["properties"]["input"] == prompts[-1]
    assert "Previous attempt failed" in second[1]["content"]
    assert second[-1] == {**second[-1], "role": "assistant", "content": RIGHT}
    assert retry["properties"]["message_count"] == len(second)
    # ListTaskSessions says the same.
    listed = {x.id: x for x in await sessions_of(api, task.id)}
    assert listed[failed["id"]].message_count == len(first)
    assert listed[retry["id"]].tokens_in == retry["properties"]["tokens_in"] > 0
    assert listed[retry["id"]].tokens_out == retry["properties"]["tokens_out"] > 0

    # Full text search finds the conversation too, and nothing can rewrite it.
    found = await call_builtin(ctx, "search_fts", {"query": "prose", "type": "SessionMessage"})
    hits = [hit["entity"]["properties"] for hit in found["results"]]
    # The reply and the reply to the platform's repair request, both of the failed session.
    assert {(h["content"], h["session_id"]) for h in hits} == {(WRONG, failed["id"])}
    message_id = (await related(ctx, failed["id"], "has_message"))[0]["entity"]["id"]
    for name, args in [
        ("update_entity", {"id": failed["id"], "expected_version": 1, "properties": {"x": 1}}),
        ("update_entity", {"id": message_id, "expected_version": 1, "properties": {"x": 1}}),
        ("create_entity", {"type": "SessionMessage", "properties": {"content": "forged"}}),
        (
            "delete_relationship",
            {"src_id": failed["id"], "dst_id": message_id, "type": "has_message"},
        ),
    ]:
        with pytest.raises(ToolError, match="reserved"):
            await call_builtin(ctx, name, args)
