"""create_subtasks (model-callable) had no MAX_TASKS_PER_GRAPH check (review finding): a
model grew one graph past the 10,000 tasks CreateTaskGraph and AddTasks allow, 50 at a
time. Now all three use one check, ``agentfleet.graph.graph_size_problem``, counted under
the project's DAG lock."""

from __future__ import annotations

import asyncpg
import pytest

from services.dispatcher.graphs.dag import MAX_TASKS_PER_GRAPH, NewTask
from services.dispatcher.graphs.graph_writes import GraphStore
from services.toolpool.builtin import ToolContext, ToolError, call_builtin
from tests.integration.test_builtin_tools import agent_run

P = "tenant-x"


async def new_graph(pool: asyncpg.Pool, size: int, *, gate: bool = False) -> str:
    """A graph of ``size`` tasks t0, t1, ...; with ``gate``, t0 waits for a task "gate"
    (which a running dispatcher fails: no agent is defined), so t0 stays pending."""
    tasks = [NewTask(key=f"t{i}", title="t") for i in range(size)]
    graph_id = await GraphStore(pool).create_graph(
        P,
        title="g",
        tasks=[*tasks, NewTask(key="gate", title="gate")] if gate else tasks,
        edges=[("gate", "t0")] if gate else [],
        max_parallel=0,
        labels={},
        request_id="",
        validate_only=False,
    )
    assert graph_id is not None
    return graph_id


async def task_count(pool: asyncpg.Pool, graph_id: str) -> int:
    return await pool.fetchval(
        "SELECT count(*) FROM kb.graph_objects WHERE type = 'SpecTask' "
        "AND properties ->> 'graph_id' = $1",
        graph_id,
    )


async def test_create_subtasks_keeps_a_graph_within_max_tasks_per_graph(
    db_pool: asyncpg.Pool,
) -> None:
    graph_id = await new_graph(db_pool, MAX_TASKS_PER_GRAPH - 1)
    run_id = await agent_run(db_pool, P, config={"subtask_agents": ["*"]})
    ctx = ToolContext(project_id=P, run_id=run_id, pool=db_pool)
    two = [{"key": "a", "title": "a"}, {"key": "b", "title": "b"}]

    with pytest.raises(ToolError) as caught:
        await call_builtin(ctx, "create_subtasks", {"tasks": two, "graph_id": graph_id})
    assert f"has {MAX_TASKS_PER_GRAPH - 1} tasks" in str(caught.value)
    assert f"at most {MAX_TASKS_PER_GRAPH} tasks" in str(caught.value)
    assert await task_count(db_pool, graph_id) == MAX_TASKS_PER_GRAPH - 1

    # Up to the limit is fine; past it, the same refusal AddTasks gives.
    await call_builtin(ctx, "create_subtasks", {"tasks": two[:1], "graph_id": graph_id})
    assert await task_count(db_pool, graph_id) == MAX_TASKS_PER_GRAPH
    with pytest.raises(ToolError):
        await call_builtin(ctx, "create_subtasks", {"tasks": two[1:], "graph_id": graph_id})
    assert await task_count(db_pool, graph_id) == MAX_TASKS_PER_GRAPH
