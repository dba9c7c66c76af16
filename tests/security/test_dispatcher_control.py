"""Issue 15, "agents cannot write the dispatcher's control data": the attacks an agent (model
output), a member and a tenant admin can try against the task DAG, each refused with nothing
written, and the limits a created task's run inherits from its creator. Malformed rows are
in test_dispatcher_malformed_rows.py."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import grpc
import pytest
from google.protobuf import json_format, struct_pb2

from agentfleet.graph import TASK_GRAPH, GraphRepository, NewObject
from agentfleet.testing.services import Stack, start_stack
from agentfleet.testing.waiting import wait_for_query
from agentfleet.v1 import dispatcher_pb2 as dpb
from agentfleet.v1 import (
    dispatcher_pb2_grpc,
    executor_pb2,
    executor_pb2_grpc,
    toolpool_pb2,
    toolpool_pb2_grpc,
)
from services.executor.registry.definitions import AgentDefinition, DefinitionRepository
from services.executor.registry.model_config import ModelConfig

P, Q = "tenant-x", "tenant-y"
GRAPH_TOOLS = [
    "create_entity",
    "update_entity",
    "delete_entity",
    "create_relationship",
    "delete_relationship",
    "create_subtasks",
]


# -- helpers -------------------------------------------------------------------------------


async def define(pool: asyncpg.Pool, project: str, name: str, **fields: Any) -> str:
    upserted = await DefinitionRepository(pool).upsert(
        project,
        AgentDefinition(name=name, system_prompt=name, model=ModelConfig(name="m"), **fields),
    )
    return str(upserted.definition.id)


async def running_run(
    pool: asyncpg.Pool,
    project: str,
    agent: str,
    *,
    parent: tuple[str, str, int] | None = None,
    max_steps: int | None = None,
    max_tokens: int | None = None,
) -> str:
    """A running run of ``agent`` (as the executor writes it); ``parent`` = (id, root, depth)."""
    return await pool.fetchval(
        """INSERT INTO kb.agent_runs (project_id, agent_definition_id, agent_name, status,
               input, parent_run_id, root_run_id, depth, max_steps, max_tokens, lease_owner,
               lease_expires_at, started_at)
           SELECT $1, d.id, d.name, 'running', 'x', $3::uuid, $4::uuid, $5, $6, $7, 'test',
                  now() + interval '1 hour', now()
           FROM kb.agent_definitions d WHERE d.project_id = $1 AND d.name = $2
           RETURNING id::text""",
        project,
        agent,
        parent[0] if parent else None,
        parent[1] if parent else None,
        parent[2] + 1 if parent else 0,
        max_steps,
        max_tokens,
    )


async def graph_rows(pool: asyncpg.Pool) -> list[tuple[Any, ...]]:
    """Every graph object and relationship with its version: equal before and after means
    nothing was written."""
    objects = await pool.fetch(
        "SELECT id, type, properties, version FROM kb.graph_objects ORDER BY id"
    )
    edges = await pool.fetch(
        "SELECT id, type, src_id, dst_id FROM kb.graph_relationships ORDER BY id"
    )
    return [tuple(r) for r in objects] + [tuple(r) for r in edges]


async def call_tool(stub: Any, run_id: str, tool: str, **args: Any) -> Any:
    arguments = struct_pb2.Struct()
    arguments.update(args)
    return await stub.CallTool(
        toolpool_pb2.CallToolRequest(
            project_id=P,
            run_id=run_id,
            tool_call_id=f"call-{uuid.uuid4().hex[:6]}",
            tool_name=tool,
            arguments=arguments,
        )
    )


@pytest.fixture
async def tools_stack(database_url: str, db_pool: asyncpg.Pool) -> AsyncIterator[Stack]:
    stack = await start_stack(
        database_url=database_url, pool=db_pool, names=("toolpool", "executor", "dispatcher")
    )
    try:
        yield stack
    finally:
        await stack.close()


@pytest.fixture
async def seeded(db_pool: asyncpg.Pool) -> dict[str, str]:
    """A planner whose definition whitelists the graph tools and may assign writer-*; a
    dispatcher-written graph with two tasks (a blocks b) and a session."""
    await define(db_pool, P, "planner", tools=GRAPH_TOOLS, config={"subtask_agents": ["writer-*"]})
    await define(db_pool, P, "writer-a")
    await define(db_pool, P, "admin-agent", tools=["*"])
    repo = GraphRepository(db_pool)
    graph = await repo.create_object(P, type=TASK_GRAPH, properties={"status": "active"})
    a, b, session = (uuid.uuid4() for _ in range(3))
    # Completed: the running dispatcher leaves them alone while the attacks run.
    base = {"status": "completed", "graph_id": graph.id, "ready": False, "max_retries": 0}
    await repo.create_objects(
        P,
        [
            NewObject(id=a, type="SpecTask", properties={**base, "key": "a", "title": "A"}),
            NewObject(id=b, type="SpecTask", properties={**base, "key": "b", "title": "B"}),
            NewObject(id=session, type="Session", properties={"task_id": str(a)}),
        ],
    )
    (edge,) = await repo.create_relationships(P, [("blocks", a, b)])
    return {
        "graph": graph.id,
        "a": str(a),
        "b": str(b),
        "session": str(session),
        "edge": edge.id,
        "run": await running_run(db_pool, P, "planner"),
    }


# -- attacks through CallTool (what a model can do) ----------------------------------------

ATTACKS: dict[str, tuple[str, Any, str]] = {
    "create SpecTask for any agent": (
        "create_entity",
        lambda s: {
            "type": "SpecTask",
            "properties": {
                "title": "pwn",
                "status": "pending",
                "graph_id": s["graph"],
                "assigned_agent": "admin-agent",
                "ready": True,
            },
        },
        "'SpecTask' is reserved",
    ),
    "create TaskGraph": ("create_entity", lambda s: {"type": "TaskGraph"}, "'TaskGraph'"),
    "create Session": ("create_entity", lambda s: {"type": "Session"}, "'Session'"),
    "raise a task's limits": (
        "update_entity",
        lambda s: {
            "id": s["a"],
            "expected_version": 1,
            "properties": {"max_retries": 10, "assigned_agent": "admin-agent"},
        },
        "'SpecTask' is reserved",
    ),
    "end a graph": (
        "update_entity",
        lambda s: {"id": s["graph"], "expected_version": 1, "properties": {"status": "cancelled"}},
        "'TaskGraph' is reserved",
    ),
    "delete a task": ("delete_entity", lambda s: {"id": s["a"]}, "'SpecTask' is reserved"),
    "delete a session": ("delete_entity", lambda s: {"id": s["session"]}, "'Session'"),
    "add a blocks edge": (
        "create_relationship",
        lambda s: {"type": "blocks", "src_id": s["b"], "dst_id": s["a"]},
        "'blocks' is reserved",
    ),
    "forge a session edge": (
        "create_relationship",
        lambda s: {"type": "has_session", "src_id": s["b"], "dst_id": s["session"]},
        "'has_session' is reserved",
    ),
    "remove a blocks edge by id": (
        "delete_relationship",
        lambda s: {"id": s["edge"]},
        "'blocks' is reserved",
    ),
    "remove a blocks edge by ends": (
        "delete_relationship",
        lambda s: {"type": "blocks", "src_id": s["a"], "dst_id": s["b"]},
        "'blocks' is reserved",
    ),
    "assign a task to an agent the definition does not allow": (
        "create_subtasks",
        lambda s: {"tasks": [{"key": "k", "title": "t", "assigned_agent": "admin-agent"}]},
        "tasks[0].assigned_agent: 'admin-agent' is not an agent this agent may assign",
    ),
    "set created_by_run_id itself": (
        "create_subtasks",
        lambda s: {"tasks": [{"key": "k", "title": "t", "created_by_run_id": str(uuid.uuid4())}]},
        "tasks[0].created_by_run_id: unknown argument",
    ),
    "a JSON-object priority": (
        "create_subtasks",
        lambda s: {"tasks": [{"key": "k", "title": "t", "priority": {"a": 1}}]},
        "tasks[0].priority: must be an integer",
    ),
    "a priority out of range": (
        "create_subtasks",
        lambda s: {"tasks": [{"key": "k", "title": "t", "priority": 10**6}]},
        "tasks[0].priority: must be at most 1000",
    ),
}


@pytest.mark.parametrize("attack", list(ATTACKS))
async def test_graph_tools_cannot_write_the_dispatchers_control_data(
    tools_stack: Stack, seeded: dict[str, str], attack: str
) -> None:
    tool, arguments, expected = ATTACKS[attack]
    # CallTool as the executor makes it for the planner's run: its own credential.
    stub = toolpool_pb2_grpc.ToolPoolServiceStub(
        tools_stack.channel("toolpool", token=tools_stack.service_tokens["executor"])
    )
    before = await graph_rows(tools_stack.pool)
    response = await call_tool(stub, seeded["run"], tool, **arguments(seeded))
    assert response.is_error
    assert expected in response.error_message
    assert await graph_rows(tools_stack.pool) == before


async def test_an_agent_without_subtask_agents_or_at_depth_2_creates_no_tasks(
    tools_stack: Stack, seeded: dict[str, str]
) -> None:
    pool = tools_stack.pool
    await define(pool, P, "loner", tools=["create_subtasks"])
    loner = await running_run(pool, P, "loner")
    top = await running_run(pool, P, "planner")
    deep = await running_run(pool, P, "planner", parent=(top, top, 1))  # depth 2
    stub = toolpool_pb2_grpc.ToolPoolServiceStub(
        tools_stack.channel("toolpool", token=tools_stack.service_tokens["executor"])
    )
    before = await graph_rows(pool)
    refused = await call_tool(stub, loner, "create_subtasks", tasks=[{"key": "k", "title": "t"}])
    assert refused.is_error
    assert "'loner' may not create tasks" in refused.error_message
    assert "config.subtask_agents" in refused.error_message
    too_deep = await call_tool(stub, deep, "create_subtasks", tasks=[{"key": "k", "title": "t"}])
    assert too_deep.is_error
    assert "depth 2" in too_deep.error_message
    assert await graph_rows(pool) == before


@pytest.mark.parametrize("role", ["member", "admin"])
async def test_create_task_graph_and_add_tasks_refuse_unbounded_properties(
    tools_stack: Stack, seeded: dict[str, str], role: str
) -> None:
    token = await tools_stack.create_token(P, role=role)
    api = dispatcher_pb2_grpc.DispatcherServiceStub(tools_stack.channel("dispatcher", token=token))
    before = await graph_rows(tools_stack.pool)
    bad = [
        ("priority", dpb.TaskSpec(key="p", title="p", priority=5000)),
        ("max_retries", dpb.TaskSpec(key="r", title="r", max_retries=1000)),
    ]
    for field, spec in bad:
        for call in (
            api.CreateTaskGraph(dpb.CreateTaskGraphRequest(project_id=P, tasks=[spec])),
            api.AddTasks(
                dpb.AddTasksRequest(project_id=P, task_graph_id=seeded["graph"], tasks=[spec])
            ),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await call
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert f"tasks[0].{field}" in (caught.value.details() or "")
    assert await graph_rows(tools_stack.pool) == before


# -- tasks run with their creator's limits (the executor computes them) ---------------------


async def test_the_run_of_a_created_task_inherits_the_creators_limits(
    tools_stack: Stack, seeded: dict[str, str]
) -> None:
    pool = tools_stack.pool
    top = await running_run(pool, P, "planner")
    creator = await running_run(
        pool, P, "planner", parent=(top, top, 0), max_steps=7, max_tokens=1000
    )
    tools = toolpool_pb2_grpc.ToolPoolServiceStub(
        tools_stack.channel("toolpool", token=tools_stack.service_tokens["executor"])
    )
    made = await call_tool(tools, creator, "create_subtasks", tasks=[{"key": "w", "title": "w"}])
    assert not made.is_error, made.error_message
    task_id = json_format.MessageToDict(made.result)["tasks"][0]["id"]
    stored = await pool.fetchval(
        "SELECT properties FROM kb.graph_objects WHERE id = $1::uuid", task_id
    )
    assert stored["created_by_run_id"] == creator
    assert stored["allowed_agents"] == ["writer-*"]

    # TriggerRun as the dispatcher makes it, asking for more than the creator had.
    executor = executor_pb2_grpc.ExecutorServiceStub(
        tools_stack.channel("executor", token=tools_stack.service_tokens["dispatcher"])
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await executor.TriggerRun(
            executor_pb2.StartRunRequest(
                project_id=P, agent_name="admin-agent", input="go", task_id=task_id
            )
        )
    assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "may assign only writer-*" in (caught.value.details() or "")
    assert not await pool.fetchval(
        "SELECT count(*) FROM kb.agent_runs WHERE agent_name = 'admin-agent'"
    )

    asked = await executor.TriggerRun(
        executor_pb2.StartRunRequest(
            project_id=P, agent_name="writer-a", input="go", task_id=task_id, max_steps=400
        )
    )
    # The dispatcher started the task too (the only agent the creator allows): both runs
    # sit under the creator with its limits.
    await wait_for_query(
        pool, "SELECT count(*) = 2 FROM kb.agent_runs WHERE task_id = $1::uuid", task_id
    )
    rows = await pool.fetch(
        "SELECT id::text, agent_name, depth, parent_run_id::text, root_run_id::text, max_steps,"
        " max_tokens FROM kb.agent_runs WHERE task_id = $1::uuid",
        task_id,
    )
    assert asked.id in {r["id"] for r in rows}
    for row in rows:
        assert dict(row) | {"id": None} == {
            "id": None,
            "agent_name": "writer-a",
            "depth": 2,
            "parent_run_id": creator,
            "root_run_id": top,
            "max_steps": 7,
            "max_tokens": 1000,
        }
