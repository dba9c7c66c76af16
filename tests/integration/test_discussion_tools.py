"""open_discussion and join_discussion through call_builtin against a real PostgreSQL:
agents discuss a task, each entry authored by the calling run, in order, bounded, within
the project (issue 37, item 4)."""

from __future__ import annotations

import asyncio

import asyncpg
import grpc
import pytest
from google.protobuf import json_format

from agentfleet.testing.services import start_stack
from services.toolpool.builtin import ToolContext, ToolError, call_builtin
from services.toolpool.builtin.discussion_tools import MAX_DISCUSSIONS_PER_TASK
from tests.integration.test_builtin_tools import agent_run
from tests.integration.test_toolpool_service import _code, _executor, call_request, make_run

P, OTHER = "proj-talk", "proj-other"


async def task_of(pool: asyncpg.Pool, project_id: str) -> str:
    return await pool.fetchval(
        "INSERT INTO kb.graph_objects (project_id, type, properties) "
        'VALUES ($1, \'SpecTask\', \'{"title": "t", "status": "pending"}\') '
        "RETURNING id::text",
        project_id,
    )


async def run_of(pool: asyncpg.Pool, project_id: str, agent: str) -> ToolContext:
    run_id = await agent_run(pool, project_id)
    await pool.execute(
        "UPDATE kb.agent_runs SET agent_name = $2 WHERE id = $1::uuid", run_id, agent
    )
    return ToolContext(project_id=project_id, run_id=run_id, pool=pool)


async def test_agents_open_and_join_a_discussion_on_a_task(db_pool: asyncpg.Pool) -> None:
    task = await task_of(db_pool, P)
    planner = await run_of(db_pool, P, "planner")
    critic = await run_of(db_pool, P, "critic")
    opened = await call_builtin(
        planner, "open_discussion", {"task_id": task, "topic": "schema?", "message": "use jsonb"}
    )
    discussion = opened["discussion"]
    assert discussion["type"] == "Discussion"
    assert discussion["properties"]["opened_by_agent"] == "planner"
    # Concurrent joins get distinct, gapless sequences.
    await asyncio.gather(
        *(
            call_builtin(
                critic, "join_discussion", {"discussion_id": discussion["id"], "message": f"m{i}"}
            )
            for i in range(5)
        )
    )
    read = await call_builtin(planner, "join_discussion", {"discussion_id": discussion["id"]})
    entries = read["entries"]
    assert [e["sequence"] for e in entries] == list(range(1, 7))
    assert entries[0] == {"sequence": 1, "author_agent": "planner", "content": "use jsonb"}
    assert {e["author_agent"] for e in entries[1:]} == {"critic"}
    later = await call_builtin(
        planner, "join_discussion", {"discussion_id": discussion["id"], "after_sequence": 5}
    )
    assert [e["sequence"] for e in later["entries"]] == [6]
    # A run dispatched for the task opens one on it without naming it.
    await db_pool.execute(
        "UPDATE kb.graph_objects SET properties = properties || jsonb_build_object("
        "'run_id', $2::text) WHERE id = $1::uuid",
        task,
        critic.run_id,
    )
    own = await call_builtin(critic, "open_discussion", {"topic": "mine"})
    assert own["discussion"]["properties"]["task_id"] == task
    with pytest.raises(ToolError, match="works on no task"):
        await call_builtin(planner, "open_discussion", {"topic": "whose?"})
    # The graph tools follow them from the task, and cannot write them.
    related = await call_builtin(planner, "get_related", {"id": task, "type": "has_discussion"})
    assert [r["entity"]["id"] for r in related["related"]] == [
        discussion["id"],
        own["discussion"]["id"],
    ]
    with pytest.raises(ToolError, match="reserved"):
        await call_builtin(
            planner, "create_entity", {"type": "DiscussionEntry", "properties": {"content": "x"}}
        )


async def test_discussions_are_bounded_and_kept_to_their_project(db_pool: asyncpg.Pool) -> None:
    task = await task_of(db_pool, P)
    ours = await run_of(db_pool, P, "planner")
    theirs = await run_of(db_pool, OTHER, "intruder")
    opened = await call_builtin(ours, "open_discussion", {"task_id": task, "topic": "t"})
    with pytest.raises(ToolError, match="no task"):
        await call_builtin(theirs, "open_discussion", {"task_id": task, "topic": "t"})
    with pytest.raises(ToolError, match="no discussion"):
        await call_builtin(
            theirs,
            "join_discussion",
            {"discussion_id": opened["discussion"]["id"], "message": "hi"},
        )
    not_a_task = opened["discussion"]["id"]
    with pytest.raises(ToolError, match="no task"):
        await call_builtin(ours, "open_discussion", {"task_id": not_a_task, "topic": "t"})
    with pytest.raises(ToolError, match="message"):
        await call_builtin(
            ours, "join_discussion", {"discussion_id": not_a_task, "message": "x" * 8001}
        )
    for _ in range(MAX_DISCUSSIONS_PER_TASK - 1):
        await call_builtin(ours, "open_discussion", {"task_id": task, "topic": "t"})
    with pytest.raises(ToolError, match="the most a task may have"):
        await call_builtin(ours, "open_discussion", {"task_id": task, "topic": "t"})


async def test_discussion_tools_are_whitelisted_like_the_others(
    database_url: str, db_pool: asyncpg.Pool
) -> None:
    """Through the toolpool's CallTool over gRPC: a run whose definition names
    ``open_discussion`` may open one; ``join_discussion``, not named, is refused."""
    stack = await start_stack(database_url=database_url, pool=db_pool, names=("toolpool",))
    try:
        task = await task_of(db_pool, P)
        run_id = await make_run(db_pool, P, ["open_discussion", "get_*"])
        executor = _executor(stack)
        opened = await executor.CallTool(
            call_request(P, run_id, "open_discussion", task_id=task, topic="t", message="hello")
        )
        assert not opened.is_error, opened.error_message
        result = json_format.MessageToDict(opened.result)
        assert result["entries"][0]["content"] == "hello"
        join = executor.CallTool(
            call_request(
                P, run_id, "join_discussion", discussion_id=result["discussion"]["id"], message="x"
            )
        )
        assert await _code(join) == grpc.StatusCode.PERMISSION_DENIED
    finally:
        await stack.close()
