"""Agent selection and where tasks come from, on the in-process stack: the optional LLM
selector (AGENTFLEET_DISPATCHER_SELECTOR_MODEL) splitting tag ties with the stub Gemini and
falling back on a bad answer, and ``create_subtasks`` called by a run that works on no task
(its tasks get the run's own task graph and are dispatched like any other)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator

import asyncpg
import pytest

from agentfleet.gemini_stub import Call, GeminiStub, Reply, Script, StubRequest
from agentfleet.testing.services import Stack, start_stack
from agentfleet.v1 import common_pb2, executor_pb2, executor_pb2_grpc
from agentfleet.v1 import dispatcher_pb2 as pb
from tests.integration import test_dispatcher_service as base
from tests.integration.test_dispatcher_control import define, sessions_of
from tests.integration.test_dispatcher_service import PROJECT, client, first_user_text, wait_graph

SELECTOR_MODEL = "selector-model"


@contextlib.asynccontextmanager
async def stack_on_stub(
    database_url: str, db_pool: asyncpg.Pool, gemini_stub: GeminiStub, **environ: str
) -> AsyncIterator[Stack]:
    """The four services in-process, on the stub model, with extra settings."""
    running = await start_stack(
        database_url=database_url,
        pool=db_pool,
        environ={"AGENTFLEET_GEMINI_BASE_URL": gemini_stub.base_url or "", **environ},
    )
    try:
        yield running
    finally:
        await running.close()


@pytest.fixture
async def llm_stack(
    database_url: str, db_pool: asyncpg.Pool, gemini_stub: GeminiStub
) -> AsyncIterator[Stack]:
    async with stack_on_stub(
        database_url, db_pool, gemini_stub, AGENTFLEET_DISPATCHER_SELECTOR_MODEL=SELECTOR_MODEL
    ) as running:
        yield running


ANSWERS = {
    "tie": json.dumps({"agent": "web-b", "reason": "web-b knows the site"}),
    "stranger": json.dumps({"agent": "nobody", "reason": "made up"}),
    "junk": "this is not JSON",
}


def selector(request: StubRequest) -> Reply:
    title = first_user_text(request).splitlines()[0].removeprefix("Task: ")
    return Reply(text=ANSWERS[title])


async def test_llm_selector_splits_tag_ties_and_a_bad_answer_falls_back(
    llm_stack: Stack, db_pool: asyncpg.Pool, gemini_stub: GeminiStub
) -> None:
    await define(db_pool, "web-a", tags=["web"], description="reads pages")
    await define(db_pool, "web-b", tags=["web"], description="reads sites")
    await define(db_pool, "crawler", tags=["crawl"])
    gemini_stub.add_script(Script(name="selector", match_model=SELECTOR_MODEL, policy=selector))
    gemini_stub.add_script(Script(name="agents", policy=lambda r: Reply(text="ok")))
    api = await client(llm_stack)
    specs = [
        pb.TaskSpec(key=k, title=k, tags=tags)
        for k, tags in (
            ("tie", ["web"]),
            ("stranger", ["web"]),
            ("junk", ["web"]),
            ("single", ["crawl"]),
        )
    ]
    created = await api.CreateTaskGraph(pb.CreateTaskGraphRequest(project_id=PROJECT, tasks=specs))
    graph = await wait_graph(api, created.task_graph.id)
    assert graph.status == pb.TASK_GRAPH_STATUS_COMPLETED
    chosen = {}
    for task in graph.tasks:
        (session,) = await sessions_of(api, task.id)
        chosen[task.spec.key] = (session.agent_name, session.chosen_by, session.reason)
    assert chosen["tie"] == ("web-b", pb.SELECTION_METHOD_LLM, "web-b knows the site")
    tied = "tags matched web-a, web-b equally; first by name"
    assert chosen["stranger"] == ("web-a", pb.SELECTION_METHOD_TAG_RULE, tied)
    assert chosen["junk"] == ("web-a", pb.SELECTION_METHOD_TAG_RULE, tied)
    assert chosen["single"][:2] == ("crawler", pb.SELECTION_METHOD_TAG_RULE)

    asked = [r for r in gemini_stub.requests if r.model == SELECTOR_MODEL]
    # One call per tie; none for the task one agent matched best.
    assert sorted(first_user_text(r).splitlines()[0] for r in asked) == [
        "Task: junk",
        "Task: stranger",
        "Task: tie",
    ]
    for request in asked:
        assert request.generation_config["responseMimeType"] == "application/json"
        listing = first_user_text(request)
        assert "- web-a: reads pages" in listing
        assert "- web-b: reads sites" in listing
        assert "crawler" not in listing


def planner(request: StubRequest) -> Reply:
    if request.turn == 0:
        plan = {
            "tasks": [{"key": "p1", "title": "part one"}, {"key": "p2", "title": "part two"}],
            "synthesis": {"title": "combine"},
        }
        return Reply(calls=[Call("create_subtasks", plan)])
    if request.turn == 1:
        more = {"tasks": [{"key": "p3", "title": "part three", "blocks": []}]}
        return Reply(calls=[Call("create_subtasks", more)])
    return Reply(text="planned")


async def test_subtasks_of_a_run_without_a_task_get_a_graph_and_are_dispatched(
    stub_stack: Stack, db_pool: asyncpg.Pool, gemini_stub: GeminiStub
) -> None:
    await define(
        db_pool, "planner", tools=["create_subtasks"], config={"subtask_agents": ["worker"]}
    )
    await define(db_pool, "worker", is_default=True)
    gemini_stub.add_script(Script(name="planner", match_system="You are planner.", policy=planner))
    gemini_stub.add_script(
        Script(name="worker", policy=lambda r: Reply(text=f"did {base.task_title(r)}"))
    )
    token = await stub_stack.create_token(PROJECT)
    executor = executor_pb2_grpc.ExecutorServiceStub(stub_stack.channel("executor", token=token))
    streamed = [
        e
        async for e in executor.StartRun(
            executor_pb2.StartRunRequest(project_id=PROJECT, agent_name="planner", input="plan"),
            timeout=20,
        )
    ]
    run = streamed[-1].run_finished.run
    assert run.status == common_pb2.RUN_STATUS_COMPLETED, run.error_message

    graph_ids = await db_pool.fetch(
        "SELECT DISTINCT properties ->> 'graph_id' AS g FROM kb.graph_objects "
        "WHERE project_id = $1 AND type = 'SpecTask' AND properties ->> 'created_by_run_id' = $2",
        PROJECT,
        run.id,
    )
    assert len(graph_ids) == 1  # both calls of the run share one graph
    api = await client(stub_stack)
    graph = await wait_graph(api, graph_ids[0]["g"])
    assert graph.status == pb.TASK_GRAPH_STATUS_COMPLETED
    assert graph.labels["created_by_run_id"] == run.id
    by_key = {t.spec.key: t for t in graph.tasks}
    assert set(by_key) == {"p1", "p2", "p3", "synthesize"}
    assert all(t.created_by_run_id == run.id for t in graph.tasks)
    assert by_key["synthesize"].summary == "did combine"
    times = {
        r["task_id"]: r
        for r in await db_pool.fetch(
            "SELECT task_id::text, created_at, completed_at FROM kb.agent_runs "
            "WHERE project_id = $1 AND task_id IS NOT NULL",
            PROJECT,
        )
    }
    synthesis_start = times[by_key["synthesize"].id]["created_at"]
    for key in ("p1", "p2"):
        assert times[by_key[key].id]["completed_at"] <= synthesis_start
