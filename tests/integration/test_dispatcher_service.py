"""The dispatcher on the in-process stack (all four services, auth on, real PostgreSQL, the
stub Gemini server): the seed 002 DAG end to end, validation errors, AddTasks, cancel."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import asyncpg
import grpc

from agentfleet.dagfile import load_dag_file
from agentfleet.gemini_stub import GeminiStub, Reply, Script, StubRequest
from agentfleet.testing.rpc_errors import rpc_error
from agentfleet.testing.services import Stack
from agentfleet.v1 import dispatcher_pb2 as pb
from agentfleet.v1 import dispatcher_pb2_grpc
from services.executor.registry.definitions import AgentDefinition, DefinitionRepository
from services.executor.registry.model_config import ModelConfig

SEED = Path(__file__).parents[2] / "examples" / "dags" / "seed002.yaml"
PROJECT = "dispatch"


def first_user_text(request: StubRequest) -> str:
    for content in request.contents:
        if content.get("role") == "user":
            return "".join(p.get("text", "") for p in content.get("parts", []))
    return ""


def task_title(request: StubRequest) -> str:
    return first_user_text(request).splitlines()[0].removeprefix("# Task: ")


async def client(stack: Stack) -> dispatcher_pb2_grpc.DispatcherServiceStub:
    token = await stack.create_token(PROJECT)
    return dispatcher_pb2_grpc.DispatcherServiceStub(stack.channel("dispatcher", token=token))


async def define(pool: asyncpg.Pool, name: str, *, tags: list[str], default: bool = False) -> None:
    await DefinitionRepository(pool).upsert(
        PROJECT,
        AgentDefinition(
            name=name,
            system_prompt=f"You are {name}.",
            model=ModelConfig(name="m"),
            tags=tags,
            is_default=default,
        ),
    )


async def wait_graph(
    api: dispatcher_pb2_grpc.DispatcherServiceStub, graph_id: str, timeout_s: float = 20.0
) -> pb.TaskGraph:
    """Follows WatchTaskGraph until it ends (the graph is done) and returns the graph."""
    async with asyncio.timeout(timeout_s):
        async for _ in api.WatchTaskGraph(
            pb.WatchTaskGraphRequest(project_id=PROJECT, task_graph_id=graph_id)
        ):
            pass
    reply = await api.GetTaskGraph(
        pb.GetTaskGraphRequest(project_id=PROJECT, task_graph_id=graph_id)
    )
    return reply.task_graph


async def test_seed002_runs_in_dag_order_with_a_retry_and_sessions(
    stub_stack: Stack, db_pool: asyncpg.Pool, gemini_stub: GeminiStub
) -> None:
    await define(db_pool, "researcher", tags=["research"])
    await define(db_pool, "writer", tags=["spec"])
    await define(db_pool, "builder", tags=["implement"], default=True)
    failed_once: set[str] = set()

    def policy(request: StubRequest) -> Reply:
        title = task_title(request)
        if title == "Implement the entities" and title not in failed_once:
            failed_once.add(title)
            return Reply(error_status=400, error_message="duplicate name for Tag entity")
        return Reply(text=f"done: {title}", delay_s=0.2)

    gemini_stub.add_script(Script(name="all", policy=policy))
    api = await client(stub_stack)
    created = await api.CreateTaskGraph(load_dag_file(SEED, project_id=PROJECT))
    graph = await wait_graph(api, created.task_graph.id)

    assert graph.status == pb.TASK_GRAPH_STATUS_COMPLETED
    assert graph.counts.completed == 6
    by_key = {t.spec.key: t for t in graph.tasks}
    runs = {
        r["task_id"]: r
        for r in await db_pool.fetch(
            "SELECT DISTINCT ON (task_id) task_id::text, created_at, started_at, completed_at "
            "FROM kb.agent_runs WHERE project_id = $1 ORDER BY task_id, created_at DESC",
            PROJECT,
        )
    }
    for edge in graph.edges:
        blocker, blocked = by_key[edge.blocker_key], by_key[edge.blocked_key]
        assert runs[blocked.id]["created_at"] >= runs[blocker.id]["completed_at"], edge
    first = [runs[by_key[k].id] for k in ("1.1", "1.2", "1.3")]
    assert max(r["started_at"] for r in first) < min(r["completed_at"] for r in first)

    retried = by_key["2.1"]
    assert retried.attempts == 2
    sessions = (
        await api.ListTaskSessions(
            pb.ListTaskSessionsRequest(project_id=PROJECT, task_id=retried.id)
        )
    ).task_sessions
    assert [s.outcome for s in sessions] == [
        pb.SESSION_OUTCOME_FAILED,
        pb.SESSION_OUTCOME_COMPLETED,
    ]
    assert "duplicate name for Tag entity" in sessions[0].error_message
    assert sessions[1].follows_up_session_id == sessions[0].id
    assert sessions[1].chosen_by == pb.SELECTION_METHOD_TAG_RULE
    assert sessions[1].agent_name == "builder"
    second_prompts = [
        first_user_text(r)
        for r in gemini_stub.requests
        if task_title(r) == "Implement the entities"
    ]
    assert "duplicate name for Tag entity" not in second_prompts[0]
    assert "duplicate name for Tag entity" in second_prompts[-1]
    assert "done: Write the spec" in second_prompts[-1]  # 1.2's summary informs 2.1

    spec_session = (
        await api.ListTaskSessions(
            pb.ListTaskSessionsRequest(project_id=PROJECT, task_id=by_key["1.2"].id)
        )
    ).task_sessions[0]
    assert list(sessions[1].informed_by_session_ids) == [spec_session.id]
    edges = await db_pool.fetch(
        "SELECT type, src_id::text, dst_id::text FROM kb.graph_relationships "
        "WHERE project_id = $1 AND type IN ('has_session', 'follows_up', 'informed_by')",
        PROJECT,
    )
    kinds = {(e["type"], e["src_id"], e["dst_id"]) for e in edges}
    assert ("has_session", retried.id, sessions[1].id) in kinds
    assert ("follows_up", sessions[1].id, sessions[0].id) in kinds
    assert ("informed_by", sessions[1].id, spec_session.id) in kinds
    assert sum(1 for e in edges if e["type"] == "has_session") == 7


async def test_bad_graphs_are_clear_errors_and_store_nothing(
    stub_stack: Stack, db_pool: asyncpg.Pool
) -> None:
    api = await client(stub_stack)
    t = [pb.TaskSpec(key=k, title=k) for k in ("a", "b", "c")]

    def edges(*pairs: str) -> list[pb.TaskEdge]:
        return [pb.TaskEdge(blocker_key=p[0], blocked_key=p[1]) for p in pairs]

    cases = {
        "direct": pb.CreateTaskGraphRequest(project_id=PROJECT, tasks=t, edges=edges("ab", "ba")),
        "indirect": pb.CreateTaskGraphRequest(
            project_id=PROJECT, tasks=t, edges=edges("ab", "bc", "ca")
        ),
        "self": pb.CreateTaskGraphRequest(project_id=PROJECT, tasks=t, edges=edges("aa")),
        "unknown key": pb.CreateTaskGraphRequest(project_id=PROJECT, tasks=t, edges=edges("az")),
        "empty": pb.CreateTaskGraphRequest(project_id=PROJECT),
        "agent": pb.CreateTaskGraphRequest(
            project_id=PROJECT, tasks=[pb.TaskSpec(key="a", title="a", assigned_agent="ghost")]
        ),
    }
    messages = {}
    for name, request in cases.items():
        error = await rpc_error(api.CreateTaskGraph(request))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, name
        messages[name] = error.details()
    assert "a -> b -> a" in messages["direct"] or "b -> a -> b" in messages["direct"]
    assert "cycle" in messages["indirect"]
    assert "c" in messages["indirect"]
    assert "edges[0]" in messages["self"]
    assert "edges[0].blocked_key: unknown task key 'z'" in messages["unknown key"]
    assert "tasks: at least one task" in messages["empty"]
    assert "tasks[0].assigned_agent" in messages["agent"]
    assert "ghost" in messages["agent"]
    assert await db_pool.fetchval("SELECT count(*) FROM kb.graph_objects") == 0

    created = await api.CreateTaskGraph(
        pb.CreateTaskGraphRequest(
            project_id=PROJECT, tasks=t, edges=edges("ab", "bc"), max_parallel=1
        )
    )
    graph_id = created.task_graph.id
    await api.CancelTaskGraph(pb.CancelTaskGraphRequest(project_id=PROJECT, task_graph_id=graph_id))
    await db_pool.fetchval("SELECT count(*) FROM kb.graph_objects")
    error = await rpc_error(
        api.AddTasks(pb.AddTasksRequest(project_id=PROJECT, task_graph_id=graph_id, tasks=[t[0]]))
    )
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION


async def test_add_tasks_rejects_a_cycle_through_existing_tasks(
    stub_stack: Stack, db_pool: asyncpg.Pool
) -> None:
    api = await client(stub_stack)
    created = await api.CreateTaskGraph(
        pb.CreateTaskGraphRequest(
            project_id=PROJECT,
            tasks=[pb.TaskSpec(key=k, title=k) for k in ("a", "b")],
            edges=[pb.TaskEdge(blocker_key="a", blocked_key="b")],
            max_parallel=1,
        )
    )
    graph_id = created.task_graph.id
    before = await db_pool.fetchval("SELECT count(*) FROM kb.graph_objects")
    error = await rpc_error(
        api.AddTasks(
            pb.AddTasksRequest(
                project_id=PROJECT,
                task_graph_id=graph_id,
                tasks=[pb.TaskSpec(key="x", title="x")],
                edges=[
                    pb.TaskEdge(blocker_key="b", blocked_key="x"),
                    pb.TaskEdge(blocker_key="x", blocked_key="a"),
                ],
            )
        )
    )
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "cycle" in error.details()
    assert "x" in error.details()
    assert await db_pool.fetchval("SELECT count(*) FROM kb.graph_objects") == before
    missing = await rpc_error(
        api.GetTaskGraph(
            pb.GetTaskGraphRequest(project_id=PROJECT, task_graph_id=str(time.time_ns())[:8])
        )
    )
    assert missing.code() == grpc.StatusCode.INVALID_ARGUMENT
