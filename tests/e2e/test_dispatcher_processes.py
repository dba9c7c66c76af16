"""The dispatcher as real processes (issue 8, "What it must show"): toolpool, history and
executor started with ``python -m``, one or two ``python -m services.dispatcher``, auth on,
the stub Gemini server in this process. Waits are on streams and database conditions with
deadlines."""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import pytest
import pytest_asyncio

from agentfleet.auth import TokenStore
from agentfleet.dagfile import load_dag_file
from agentfleet.gemini_stub import Call, GeminiStub, Reply, Script, StubRequest
from agentfleet.postgres import db
from agentfleet.rpc.clients import open_channel
from agentfleet.testing.database import DatabaseFactory
from agentfleet.testing.services import (
    ProcessStack,
    create_service_tokens,
    free_port,
    start_process_stack,
    start_service_process,
    wait_serving,
)
from agentfleet.v1 import dispatcher_pb2 as pb
from agentfleet.v1 import dispatcher_pb2_grpc
from services.executor.registry.definitions import AgentDefinition, DefinitionRepository
from services.executor.registry.model_config import ModelConfig
from tests.integration.test_dispatcher_control import hangs_but_summarises
from tests.integration.test_dispatcher_service import first_user_text, task_title

SEED = Path(__file__).parents[2] / "examples" / "dags" / "seed002.yaml"


@dataclass(kw_only=True, slots=True)
class Base:
    database_url: str
    pool: asyncpg.Pool
    stub: GeminiStub
    stack: ProcessStack
    env: dict[str, str]
    log_dir: Path


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def base(
    database_factory: DatabaseFactory, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Base]:
    database_url = await database_factory.create_database()
    pool = await db.create_pool(database_url, min_size=1, max_size=10)
    stub = GeminiStub()
    await stub.start()
    tokens = await create_service_tokens(pool, label="e2e")
    env = {
        "AGENTFLEET_AUTH": "on",
        "AGENTFLEET_GEMINI_BASE_URL": stub.base_url or "",
        "AGENTFLEET_SHUTDOWN_GRACE_S": "3",
        "AGENTFLEET_EXECUTOR_CONCURRENCY": "32",
    }
    log_dir = tmp_path_factory.mktemp("dispatch")
    stack = await start_process_stack(
        database_url=database_url,
        log_dir=log_dir,
        environ=env,
        names=("toolpool", "history", "executor"),
        service_tokens=tokens,
    )
    env |= {
        # What the dispatcher processes started below get: the dispatcher's own token.
        "AGENTFLEET_SERVICE_TOKEN": tokens["dispatcher"],
        "DATABASE_URL": database_url,
        "AGENTFLEET_LOG_FORMAT": "json",
        **{f"AGENTFLEET_{n.upper()}_ADDR": a for n, a in stack.addresses.items()},
    }
    try:
        yield Base(
            database_url=database_url, pool=pool, stub=stub, stack=stack, env=env, log_dir=log_dir
        )
    finally:
        await stack.stop(grace_s=5.0)
        await stub.stop()
        await pool.close()
        await database_factory.drop_database(database_url)


@contextlib.asynccontextmanager
async def dispatchers(
    base: Base, count: int
) -> AsyncIterator[list[tuple[asyncio.subprocess.Process, str]]]:
    """``count`` dispatcher processes; stopped (SIGTERM) at exit."""
    started: list[tuple[asyncio.subprocess.Process, str]] = []
    try:
        for _i in range(count):
            port = free_port()
            env = {**base.env, "AGENTFLEET_DISPATCHER_PORT": str(port)}
            process = await start_service_process(
                "dispatcher", env, base.log_dir / f"dispatcher-{port}.log"
            )
            started.append((process, f"127.0.0.1:{port}"))
        await asyncio.gather(*(wait_serving(a, timeout_s=30.0, process=p) for p, a in started))
        yield started
    finally:
        for process, _ in started:
            if process.returncode is None:
                process.terminate()
        for process, _ in started:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(process.wait(), 10.0)


async def project(base: Base, prefix: str) -> tuple[str, str]:
    project_id = f"{prefix}-{uuid.uuid4().hex[:8]}"
    created = await TokenStore(base.pool).create(project_id=project_id, role="admin", name="e2e")
    return project_id, created.token


async def define(
    base: Base,
    project_id: str,
    name: str,
    *,
    tags: list[str] = (),
    default: bool = False,
    tools: list[str] = (),
    config: dict[str, list[str]] | None = None,
) -> None:
    await DefinitionRepository(base.pool).upsert(
        project_id,
        AgentDefinition(
            name=name,
            system_prompt=f"You are {name}. [{project_id}]",
            model=ModelConfig(name="m"),
            tags=list(tags),
            is_default=default,
            tools=list(tools),
            config=dict(config or {}),
        ),
    )


async def until_done(api, project_id: str, graph_id: str, timeout_s: float) -> pb.TaskGraph:  # type: ignore[no-untyped-def]
    async with asyncio.timeout(timeout_s):
        async for _ in api.WatchTaskGraph(
            pb.WatchTaskGraphRequest(project_id=project_id, task_graph_id=graph_id)
        ):
            pass
    reply = await api.GetTaskGraph(
        pb.GetTaskGraphRequest(project_id=project_id, task_graph_id=graph_id)
    )
    return reply.task_graph


async def run_rows(base: Base, project_id: str) -> list[asyncpg.Record]:
    return await base.pool.fetch(
        "SELECT id::text, task_id::text, request_id, created_at, started_at, completed_at, status "
        "FROM kb.agent_runs WHERE project_id = $1",
        project_id,
    )


def assert_order(graph: pb.TaskGraph, runs: list[asyncpg.Record]) -> None:
    """Every blocked task's (every) run was created after its blocker's completed run."""
    ids = {t.spec.key: t.id for t in graph.tasks}
    completed = {r["task_id"]: r["completed_at"] for r in runs if r["status"] == "completed"}
    for edge in graph.edges:
        blocker_done = completed[ids[edge.blocker_key]]
        for r in runs:
            if r["task_id"] == ids[edge.blocked_key]:
                assert r["created_at"] >= blocker_done, (edge.blocker_key, edge.blocked_key)


async def test_seed002_on_processes(base: Base) -> None:
    project_id, token = await project(base, "seed")
    marker = f"[{project_id}]"
    await define(base, project_id, "researcher", tags=["research"])
    await define(base, project_id, "writer", tags=["spec"])
    await define(base, project_id, "builder", tags=["implement"], default=True)
    failed: list[str] = []

    def policy(request: StubRequest) -> Reply:
        title = task_title(request)
        if title == "Implement the entities" and not failed:
            failed.append(first_user_text(request))
            return Reply(error_status=400, error_message="duplicate name for Tag entity")
        return Reply(text=f"done: {title}", delay_s=0.2)

    base.stub.add_script(Script(name=project_id, match_system=marker, policy=policy))
    async with dispatchers(base, 1) as [(_, address)]:
        channel = open_channel(address, token=token)
        api = dispatcher_pb2_grpc.DispatcherServiceStub(channel)
        created = await api.CreateTaskGraph(load_dag_file(SEED, project_id=project_id))
        graph = await until_done(api, project_id, created.task_graph.id, 30.0)
        await channel.close()
    assert graph.status == pb.TASK_GRAPH_STATUS_COMPLETED
    runs = await run_rows(base, project_id)
    assert_order(graph, runs)
    by_key = {t.spec.key: t for t in graph.tasks}
    first = [r for r in runs if r["task_id"] in {by_key[k].id for k in ("1.1", "1.2", "1.3")}]
    assert max(r["started_at"] for r in first) < min(r["completed_at"] for r in first)
    assert by_key["2.1"].attempts == 2
    prompts = [
        first_user_text(r)
        for r in base.stub.requests_for(project_id)
        if task_title(r) == "Implement the entities"
    ]
    assert "duplicate name for Tag entity" not in prompts[0]
    assert "duplicate name for Tag entity" in prompts[-1]
    sessions = await base.pool.fetch(
        "SELECT s.properties FROM kb.graph_relationships r JOIN kb.graph_objects s "
        "ON s.id = r.dst_id WHERE r.project_id = $1 AND r.type = 'has_session'",
        project_id,
    )
    assert len(sessions) == 7
    follows = await base.pool.fetchval(
        "SELECT count(*) FROM kb.graph_relationships WHERE project_id = $1 AND type = 'follows_up'",
        project_id,
    )
    assert follows == 1


def random_dag(n: int, seed: int) -> tuple[list[pb.TaskSpec], list[pb.TaskEdge]]:
    rng = random.Random(seed)
    tasks = [pb.TaskSpec(key=f"t{i}", title=f"task {i}", max_retries=0) for i in range(n)]
    edges = []
    for j in range(1, n):
        for i in rng.sample(range(max(0, j - 40), j), k=min(j, rng.randint(0, 2))):
            edges.append(pb.TaskEdge(blocker_key=f"t{i}", blocked_key=f"t{j}"))
    return tasks, edges


async def test_two_dispatchers_share_a_500_task_dag_and_survive_a_kill(base: Base) -> None:
    project_id, token = await project(base, "dag500")
    await define(base, project_id, "worker", default=True)
    base.stub.add_script(
        Script(name=project_id, match_system=f"[{project_id}]", policy=lambda r: Reply(text="ok"))
    )
    tasks, edges = random_dag(500, seed=8)
    async with dispatchers(base, 2) as started:
        (victim, _), (_, address) = started
        channel = open_channel(address, token=token)
        api = dispatcher_pb2_grpc.DispatcherServiceStub(channel)
        created = await api.CreateTaskGraph(
            pb.CreateTaskGraphRequest(project_id=project_id, tasks=tasks, edges=edges)
        )
        graph_id = created.task_graph.id
        # Kill one dispatcher mid-way: once 150 runs have completed (deadline 30 s).
        for _ in range(600):
            done = await base.pool.fetchval(
                "SELECT count(*) FROM kb.agent_runs WHERE project_id = $1 AND status = 'completed'",
                project_id,
            )
            if done >= 150:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("150 runs did not complete within 30 s")
        victim.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        graph = await until_done(api, project_id, graph_id, 40.0)
        await channel.close()
    assert time.monotonic() - killed_at < 40
    assert graph.status == pb.TASK_GRAPH_STATUS_COMPLETED, graph.counts
    runs = await run_rows(base, project_id)
    per_task: dict[str, int] = {}
    for r in runs:
        per_task[r["task_id"]] = per_task.get(r["task_id"], 0) + 1
    assert len(per_task) == 500
    assert set(per_task.values()) == {1}
    assert all(t.attempts == 1 for t in graph.tasks)
    assert_order(graph, runs)
    owners = await base.pool.fetch(
        "SELECT properties ->> 'dispatcher' AS d, count(*) FROM kb.graph_objects "
        "WHERE project_id = $1 AND type = 'Session' GROUP BY 1",
        project_id,
    )
    assert len(owners) == 2  # both dispatchers took part before the kill


async def test_agent_creates_subtasks_then_synthesis_runs_last(base: Base) -> None:
    project_id, token = await project(base, "pattern2")
    subtask_agents = {"subtask_agents": ["worker"]}
    await define(base, project_id, "planner", tools=["create_subtasks"], config=subtask_agents)
    await define(base, project_id, "worker", default=True)
    cycle = {
        "tasks": [
            {"key": "a", "title": "A", "blocked_by": ["b"]},
            {"key": "b", "title": "B", "blocked_by": ["a"]},
        ]
    }
    plan = {
        "tasks": [{"key": f"part{i}", "title": f"Research part {i}"} for i in range(3)],
        "synthesis": {"title": "Combine the parts"},
    }

    def planner(request: StubRequest) -> Reply:
        if request.turn == 0:
            return Reply(calls=[Call("create_subtasks", cycle)])
        if request.turn == 1:
            return Reply(calls=[Call("create_subtasks", plan)])
        return Reply(text="planned")

    base.stub.add_script(
        Script(
            name=f"{project_id}-plan",
            match_system=f"You are planner. [{project_id}]",
            policy=planner,
        )
    )
    base.stub.add_script(
        Script(
            name=f"{project_id}-work",
            match_system=f"[{project_id}]",
            policy=lambda r: Reply(text=f"result of {task_title(r)}"),
        )
    )
    async with dispatchers(base, 1) as [(_, address)]:
        channel = open_channel(address, token=token)
        api = dispatcher_pb2_grpc.DispatcherServiceStub(channel)
        created = await api.CreateTaskGraph(
            pb.CreateTaskGraphRequest(
                project_id=project_id,
                tasks=[
                    pb.TaskSpec(key="plan", title="Plan the research", assigned_agent="planner")
                ],
            )
        )
        graph = await until_done(api, project_id, created.task_graph.id, 30.0)
        await channel.close()
    assert graph.status == pb.TASK_GRAPH_STATUS_COMPLETED
    keys = sorted(t.spec.key for t in graph.tasks)
    assert keys == ["part0", "part1", "part2", "plan", "synthesize"]  # the cycle stored nothing
    cycle_reply = base.stub.requests_for(f"{project_id}-plan")[1].function_responses()[0]
    assert "cycle" in str(cycle_reply)
    runs = await run_rows(base, project_id)
    assert_order(graph, runs)
    synthesis_prompt = next(
        first_user_text(r)
        for r in base.stub.requests_for(f"{project_id}-work")
        if task_title(r) == "Combine the parts"
    )
    for i in range(3):
        assert f"result of Research part {i}" in synthesis_prompt


async def test_a_task_cut_by_its_deadline_every_time_is_resumed_a_bounded_number_of_times(
    base: Base,
) -> None:
    """Issue 37 item 1 on processes: each cut model call counts as a step, and the task's
    max_resumes ends the resume loop with the reason (it resumed forever before, total_steps
    0)."""
    project_id, token = await project(base, "resumes")
    await DefinitionRepository(base.pool).upsert(
        project_id,
        AgentDefinition(
            name="hanger",
            system_prompt=f"You are hanger. [{project_id}]",
            model=ModelConfig(name="m"),
            tools=["list_entities"],
            default_timeout_s=0.3,
        ),
    )
    base.stub.add_script(
        Script(name=f"hanger-{project_id}", match_system=project_id, policy=hangs_but_summarises)
    )
    async with (
        dispatchers(base, 1) as [(_, address)],
        open_channel(address, token=token) as channel,
    ):
        api = dispatcher_pb2_grpc.DispatcherServiceStub(channel)
        created = await api.CreateTaskGraph(
            pb.CreateTaskGraphRequest(
                project_id=project_id,
                tasks=[
                    pb.TaskSpec(
                        key="slow",
                        title="slow",
                        assigned_agent="hanger",
                        max_retries=0,
                        max_resumes=2,
                    )
                ],
            )
        )
        graph = await until_done(api, project_id, created.task_graph.id, timeout_s=90)
    (task,) = graph.tasks
    assert task.status == pb.TASK_STATUS_FAILED
    assert "max_resumes (2)" in task.error_message
    (run,) = await base.pool.fetch(
        "SELECT status, resume_count, total_steps FROM kb.agent_runs WHERE project_id = $1",
        project_id,
    )
    # Three executions (the first and two resumes), each one cut model call counted.
    assert (run["status"], run["resume_count"], run["total_steps"]) == ("paused", 2, 3)
