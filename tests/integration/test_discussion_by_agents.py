"""Agents discuss a task through their own model calls (seed 002: "tasks can spawn
discussions with multiple agents"): on the four services and the stub model, the agent of
one task opens a discussion on it, the agent of the task it blocks finds and joins it; the
entries name each author's agent and run, and both conversations are in the graph."""

from __future__ import annotations

import json
from typing import Any

import asyncpg

from agentfleet.gemini_stub import Call, GeminiStub, Reply, Script, StubRequest
from agentfleet.testing.services import Stack
from agentfleet.v1 import dispatcher_pb2 as pb
from tests.integration.test_dispatcher_control import define, sessions_of
from tests.integration.test_dispatcher_service import PROJECT, client, wait_graph


def found(value: Any, key: str) -> Any:
    """The first value of ``key`` anywhere in a tool response."""
    if isinstance(value, dict):
        if key in value:
            return value[key]
        value = list(value.values())
    if isinstance(value, list):
        for item in value:
            hit = found(item, key)
            if hit is not None:
                return hit
    return None


def architect(request: StubRequest) -> Reply:
    if request.turn == 0:
        return Reply(calls=[Call("open_discussion", {"topic": "naming", "message": "snake_case"})])
    return Reply(text="design done")


def builder(request: StubRequest) -> Reply:
    responses = request.function_responses()
    if request.turn == 0:
        return Reply(calls=[Call("list_entities", {"type": "Discussion"})])
    if request.turn == 1:
        discussion = found(responses[-1], "entities")[0]["id"]
        return Reply(
            calls=[Call("join_discussion", {"discussion_id": discussion, "message": "agreed"})]
        )
    entries = found(responses[-1], "entries")
    return Reply(text=json.dumps([e["content"] for e in entries]))


async def test_two_agents_discuss_a_task(
    stub_stack: Stack, db_pool: asyncpg.Pool, gemini_stub: GeminiStub
) -> None:
    await define(db_pool, "architect", tools=["open_discussion"])
    await define(db_pool, "builder", tools=["list_entities", "join_discussion"])
    gemini_stub.add_script(Script(name="a", match_system="You are architect", policy=architect))
    gemini_stub.add_script(Script(name="b", match_system="You are builder", policy=builder))
    api = await client(stub_stack)
    created = await api.CreateTaskGraph(
        pb.CreateTaskGraphRequest(
            project_id=PROJECT,
            tasks=[
                pb.TaskSpec(key="design", title="design", assigned_agent="architect"),
                pb.TaskSpec(key="build", title="build", assigned_agent="builder"),
            ],
            edges=[pb.TaskEdge(blocker_key="design", blocked_key="build")],
        )
    )
    graph = await wait_graph(api, created.task_graph.id)
    assert graph.status == pb.TASK_GRAPH_STATUS_COMPLETED
    tasks = {t.spec.key: t for t in graph.tasks}
    assert json.loads(tasks["build"].summary) == ["snake_case", "agreed"]

    (design,) = await sessions_of(api, tasks["design"].id)
    (build,) = await sessions_of(api, tasks["build"].id)
    entries = await db_pool.fetch(
        "SELECT e.properties FROM kb.graph_relationships d "
        "JOIN kb.graph_relationships r ON r.src_id = d.dst_id AND r.type = 'has_entry' "
        "JOIN kb.graph_objects e ON e.id = r.dst_id "
        "WHERE d.src_id = $1::uuid AND d.type = 'has_discussion' "
        "ORDER BY (r.properties ->> 'sequence')::int",
        tasks["design"].id,
    )
    assert [
        (e["properties"]["author_agent"], e["properties"]["author_run_id"]) for e in entries
    ] == [("architect", design.run_id), ("builder", build.run_id)]
    # The tool calls are part of each session's conversation in the graph.
    roles = await db_pool.fetchval(
        "SELECT array_agg(m.properties ->> 'role' ORDER BY (r.properties ->> 'sequence')::int) "
        "FROM kb.graph_relationships r JOIN kb.graph_objects m ON m.id = r.dst_id "
        "WHERE r.src_id = $1::uuid AND r.type = 'has_message'",
        build.id,
    )
    assert roles == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant"]
