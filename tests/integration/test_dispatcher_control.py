"""The dispatcher's control paths on the in-process stack (real PostgreSQL, real gRPC, the
stub Gemini): max_parallel per graph, paused runs resumed through ResumeRun (and the 500-step
cap that ends a task PAUSED), RetryTask, CancelTaskGraph stopping in-flight runs, paging of
ListTaskGraphs and the events of WatchTaskGraph."""

from __future__ import annotations

import itertools
from typing import Any

import asyncpg
import grpc

from agentfleet.gemini_stub import Call, GeminiStub, Reply, Script, StubRequest
from agentfleet.testing.rpc_errors import rpc_error
from agentfleet.testing.services import Stack, start_stack
from agentfleet.testing.waiting import wait_for, wait_for_query
from agentfleet.v1 import dispatcher_pb2 as pb
from services.executor.registry.definitions import AgentDefinition, DefinitionRepository
from services.executor.registry.model_config import ModelConfig
from tests.integration.test_dispatcher_service import (
    PROJECT,
    client,
    first_user_text,
    task_title,
    wait_graph,
)


async def define(pool: asyncpg.Pool, name: str, **fields: Any) -> None:
    await DefinitionRepository(pool).upsert(
        PROJECT,
        AgentDefinition(
            name=name, system_prompt=f"You are {name}.", model=ModelConfig(name="m"), **fields
        ),
    )


def tasks(*keys: str, agent: str = "", **fields: Any) -> list[pb.TaskSpec]:
    return [pb.TaskSpec(key=k, title=f"do {k}", assigned_agent=agent, **fields) for k in keys]


def edge(blocker: str, blocked: str) -> pb.TaskEdge:
    return pb.TaskEdge(blocker_key=blocker, blocked_key=blocked)


async def test_max_parallel_caps_a_graph_but_not_its_neighbour(
    stub_stack: Stack, db_pool: asyncpg.Pool, gemini_stub: GeminiStub
) -> None:
    await define(db_pool, "worker")
    gemini_stub.add_script(Script(name="w", policy=lambda r: Reply(text="ok", delay_s=0.3)))
    api = await client(stub_stack)
    capped = await api.CreateTaskGraph(
        pb.CreateTaskGraphRequest(
            project_id=PROJECT, tasks=tasks("a", "b", "c", "d", agent="worker"), max_parallel=2
        )
    )
    free = await api.CreateTaskGraph(
        pb.CreateTaskGraphRequest(project_id=PROJECT, tasks=tasks("a", "b", "c", agent="worker"))
    )
    assert capped.task_graph.max_parallel == 2
    for created in (capped, free):
        graph = await wait_graph(api, created.task_graph.id)
        assert graph.status == pb.TASK_GRAPH_STATUS_COMPLETED

    async def most_at_once(graph_id: str) -> int:
        rows = await db_pool.fetch(
            "SELECT r.started_at, r.completed_at FROM kb.agent_runs r "
            "JOIN kb.graph_objects t ON t.id = r.task_id "
            "WHERE r.project_id = $1 AND t.properties ->> 'graph_id' = $2",
            PROJECT,
            graph_id,
        )
        return max(
            sum(1 for o in rows if o["started_at"] <= r["started_at"] < o["completed_at"])
            for r in rows
        )

    assert await most_at_once(capped.task_graph.id) == 2
    assert await most_at_once(free.task_graph.id) == 3


def stepper(request: StubRequest) -> Reply:
    """Works with a tool while it has tools (max_steps=1 pauses the run after one step),
    summarises when the soft stop takes its tools, and finishes once resumed."""
    if request.last_user_text() == "continue":
        # Slow on purpose: the dispatcher has stopped reading ResumeRun by now.
        return Reply(text="finished after resume", delay_s=0.3)
    if request.tool_names:
        return Reply(text="working", calls=[Call("list_entities", {"type": "Note"})])
    return Reply(text="partial summary")


async def sessions_of(api: Any, task_id: str) -> list[pb.TaskSession]:
    reply = await api.ListTaskSessions(
        pb.ListTaskSessionsRequest(project_id=PROJECT, task_id=task_id)
    )
    return list(reply.task_sessions)


async def test_paused_run_is_resumed_then_the_cap_pauses_the_task_and_retry_finishes_it(
    stub_stack: Stack, db_pool: asyncpg.Pool, gemini_stub: GeminiStub
) -> None:
    await define(db_pool, "stepper", tools=["list_entities"], max_steps=1)
    gemini_stub.add_script(Script(name="stepper", policy=stepper))
    api = await client(stub_stack)

    created = await api.CreateTaskGraph(
        pb.CreateTaskGraphRequest(project_id=PROJECT, tasks=tasks("long", agent="stepper"))
    )
    graph = await wait_graph(api, created.task_graph.id)
    assert graph.status == pb.TASK_GRAPH_STATUS_COMPLETED
    (task,) = graph.tasks
    assert (task.attempts, task.summary) == (1, "finished after resume")
    (session,) = await sessions_of(api, task.id)
    assert (session.outcome, session.resume_count) == (pb.SESSION_OUTCOME_COMPLETED, 1)
    run = await db_pool.fetchrow(
        "SELECT status, resume_count, total_steps FROM kb.agent_runs WHERE id = $1::uuid",
        session.run_id,
    )
    # One run, resumed once, ran to completion after the ResumeRun stream was dropped.
    assert (run["status"], run["resume_count"]) == ("completed", 1)
    kinds = [
        r["type"]
        for r in await db_pool.fetch(
            "SELECT type FROM kb.agent_run_events WHERE run_id = $1::uuid ORDER BY seq",
            session.run_id,
        )
    ]
    assert kinds.count("run_finished") == 2
    assert kinds[-1] == "run_finished"

    # A run already at the 500-step cap cannot be resumed: the task ends PAUSED.
    await db_pool.execute(
        """
        CREATE FUNCTION at_cap_steps() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN NEW.total_steps := 500; RETURN NEW; END $$;
        CREATE TRIGGER at_cap BEFORE UPDATE ON kb.agent_runs FOR EACH ROW
          WHEN (NEW.status = 'paused') EXECUTE FUNCTION at_cap_steps();
        """
    )
    created = await api.CreateTaskGraph(
        pb.CreateTaskGraphRequest(
            project_id=PROJECT,
            tasks=tasks("capped", "after", agent="stepper"),
            edges=[edge("capped", "after")],
        )
    )
    graph = await wait_graph(api, created.task_graph.id)
    assert graph.status == pb.TASK_GRAPH_STATUS_PAUSED
    capped, after = graph.tasks
    assert capped.status == pb.TASK_STATUS_PAUSED
    assert (after.status, after.blocked, graph.counts.blocked) == (pb.TASK_STATUS_PENDING, True, 1)
    (first,) = await sessions_of(api, capped.id)
    assert (first.outcome, first.summary) == (pb.SESSION_OUTCOME_PAUSED, "partial summary")

    # RetryTask: a new attempt (with the feedback in its prompt) that resumes and completes.
    await db_pool.execute("DROP TRIGGER at_cap ON kb.agent_runs")
    retried = await api.RetryTask(
        pb.RetryTaskRequest(project_id=PROJECT, task_id=capped.id, feedback="wrap it up")
    )
    assert retried.task.status == pb.TASK_STATUS_PENDING
    graph = await wait_graph(api, created.task_graph.id)
    assert graph.status == pb.TASK_GRAPH_STATUS_COMPLETED
    first, second = await sessions_of(api, capped.id)
    assert second.follows_up_session_id == first.id
    assert (second.outcome, second.resume_count) == (pb.SESSION_OUTCOME_COMPLETED, 1)
    prompts = [first_user_text(r) for r in gemini_stub.requests if task_title(r) == "do capped"]
    assert "wrap it up" not in prompts[0]
    assert "wrap it up" in prompts[-1]


async def test_retry_task_preconditions_and_a_failed_task_retried_to_completion(
    stub_stack: Stack, db_pool: asyncpg.Pool, gemini_stub: GeminiStub
) -> None:
    await define(db_pool, "worker")
    failures = itertools.count()

    def policy(request: StubRequest) -> Reply:
        if task_title(request) == "do flaky" and next(failures) == 0:
            return Reply(error_status=400, error_message="the flaky thing broke")
        return Reply(text=f"done {task_title(request)}")

    gemini_stub.add_script(Script(name="w", policy=policy))
    api = await client(stub_stack)
    created = await api.CreateTaskGraph(
        pb.CreateTaskGraphRequest(
            project_id=PROJECT,
            tasks=tasks("flaky", "next", agent="worker", max_retries=0),
            edges=[edge("flaky", "next")],
        )
    )
    graph = await wait_graph(api, created.task_graph.id)
    assert graph.status == pb.TASK_GRAPH_STATUS_FAILED
    flaky, nxt = graph.tasks
    assert flaky.status == pb.TASK_STATUS_FAILED
    assert "the flaky thing broke" in flaky.error_message
    assert nxt.blocked
    assert nxt.attempts == 0

    for task_id, code in (
        (nxt.id, grpc.StatusCode.FAILED_PRECONDITION),  # pending
        ("6d1f0d8e-0000-4000-8000-000000000000", grpc.StatusCode.NOT_FOUND),
        ("not-a-task", grpc.StatusCode.INVALID_ARGUMENT),
    ):
        error = await rpc_error(
            api.RetryTask(pb.RetryTaskRequest(project_id=PROJECT, task_id=task_id))
        )
        assert error.code() == code, (task_id, error.details())

    await api.RetryTask(pb.RetryTaskRequest(project_id=PROJECT, task_id=flaky.id))
    graph = await wait_graph(api, created.task_graph.id)
    assert graph.status == pb.TASK_GRAPH_STATUS_COMPLETED
    flaky, nxt = graph.tasks
    assert (flaky.attempts, nxt.attempts) == (2, 1)
    assert flaky.summary == "done do flaky"
    error = await rpc_error(
        api.RetryTask(pb.RetryTaskRequest(project_id=PROJECT, task_id=flaky.id))
    )
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "completed" in error.details()


async def test_cancel_task_graph_stops_in_flight_runs(
    stub_stack: Stack, db_pool: asyncpg.Pool, gemini_stub: GeminiStub
) -> None:
    await define(db_pool, "sleeper")
    gemini_stub.add_script(Script(name="s", policy=lambda r: Reply(hang=True)))
    api = await client(stub_stack)
    created = await api.CreateTaskGraph(
        pb.CreateTaskGraphRequest(
            project_id=PROJECT,
            tasks=tasks("a", "b", "later", agent="sleeper"),
            edges=[edge("a", "later"), edge("b", "later")],
        )
    )
    graph_id = created.task_graph.id
    # Both runs are in their model call (a message is stored) before the cancel.
    await wait_for_query(
        db_pool,
        "SELECT count(*) = 2 FROM kb.agent_runs r WHERE project_id = $1 AND status = 'running' "
        "AND EXISTS (SELECT 1 FROM kb.agent_run_messages m WHERE m.run_id = r.id)",
        PROJECT,
    )
    reply = await api.CancelTaskGraph(
        pb.CancelTaskGraphRequest(project_id=PROJECT, task_graph_id=graph_id, reason="stop now")
    )
    assert reply.task_graph.status == pb.TASK_GRAPH_STATUS_CANCELLED
    await wait_for_query(
        db_pool,
        "SELECT count(*) = 2 FROM kb.agent_runs WHERE project_id = $1 AND status = 'cancelled'",
        PROJECT,
    )
    await wait_for_query(
        db_pool,
        "SELECT count(*) = 3 FROM kb.graph_objects WHERE project_id = $1 AND type = 'SpecTask' "
        "AND status = 'cancelled'",
        PROJECT,
    )
    graph = await wait_graph(api, graph_id)
    assert graph.status == pb.TASK_GRAPH_STATUS_CANCELLED
    assert graph.counts.cancelled == 3
    assert graph.HasField("complete_time")
    by_key = {t.spec.key: t for t in graph.tasks}
    assert by_key["later"].attempts == 0
    for key in ("a", "b"):
        (session,) = await sessions_of(api, by_key[key].id)
        assert session.outcome == pb.SESSION_OUTCOME_CANCELLED
    again = await api.CancelTaskGraph(
        pb.CancelTaskGraphRequest(project_id=PROJECT, task_graph_id=graph_id)
    )
    assert again.task_graph.status == pb.TASK_GRAPH_STATUS_CANCELLED
    assert (
        await db_pool.fetchval("SELECT count(*) FROM kb.agent_runs WHERE project_id = $1", PROJECT)
        == 2
    )
    error = await rpc_error(
        api.RetryTask(pb.RetryTaskRequest(project_id=PROJECT, task_id=by_key["a"].id))
    )
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION


def hangs_but_summarises(request: StubRequest) -> Reply:
    """Every working call hangs past the run's deadline; the summary after it (no tools)
    answers at once, so each execution ends PAUSED by its timeout."""
    if request.tool_names:
        return Reply(text="never in time", delay_s=30)
    return Reply(text="ran out of time")


async def test_a_run_cut_by_its_deadline_every_time_is_resumed_a_bounded_number_of_times(
    stub_stack: Stack, db_pool: asyncpg.Pool, gemini_stub: GeminiStub
) -> None:
    """Each cut model call counts as a step, and the task's max_resumes ends the loop: the
    attempt fails with the reason instead of being resumed until the 500-step cap."""
    await define(db_pool, "hanger", tools=["list_entities"], default_timeout_s=0.3)
    gemini_stub.add_script(Script(name="hanger", policy=hangs_but_summarises))
    api = await client(stub_stack)
    created = await api.CreateTaskGraph(
        pb.CreateTaskGraphRequest(
            project_id=PROJECT, tasks=tasks("slow", agent="hanger", max_retries=0, max_resumes=2)
        )
    )
    graph = await wait_graph(api, created.task_graph.id)
    (task,) = graph.tasks
    assert task.status == pb.TASK_STATUS_FAILED
    assert "max_resumes (2)" in task.error_message
    (session,) = await sessions_of(api, task.id)
    run = await db_pool.fetchrow(
        "SELECT status, resume_count, total_steps FROM kb.agent_runs WHERE id = $1::uuid",
        session.run_id,
    )
    # Three executions (the first and two resumes), each one cut model call counted.
    assert (run["status"], run["resume_count"], run["total_steps"]) == ("paused", 2, 3)


async def test_max_resumes_out_of_range_is_refused_naming_the_field(stub_stack: Stack) -> None:
    api = await client(stub_stack)
    refused = await rpc_error(
        api.CreateTaskGraph(
            pb.CreateTaskGraphRequest(project_id=PROJECT, tasks=tasks("x", max_resumes=101))
        )
    )
    assert refused.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "tasks[0].max_resumes" in (refused.details() or "")


async def test_a_tasks_timeout_reaches_its_run_with_its_fraction(
    stub_stack: Stack, db_pool: asyncpg.Pool, gemini_stub: GeminiStub
) -> None:
    await define(db_pool, "quick")
    gemini_stub.add_script(Script(name="quick", policy=lambda r: Reply(text="ok")))
    api = await client(stub_stack)
    spec = tasks("t", agent="quick")[0]
    spec.timeout.FromMilliseconds(2500)
    created = await api.CreateTaskGraph(pb.CreateTaskGraphRequest(project_id=PROJECT, tasks=[spec]))
    graph = await wait_graph(api, created.task_graph.id)
    (task,) = graph.tasks
    timeout = await db_pool.fetchval(
        "SELECT extract(epoch FROM timeout) FROM kb.agent_runs WHERE id = $1::uuid",
        task.last_run_id,
    )
    assert float(timeout) == 2.5  # was 2: the dispatcher sent whole seconds


async def test_a_tasks_last_run_id_is_its_running_attempts_run(
    stub_stack: Stack, db_pool: asyncpg.Pool, gemini_stub: GeminiStub
) -> None:
    await define(db_pool, "busy")
    gemini_stub.add_script(Script(name="busy", policy=lambda r: Reply(hang=True)))
    api = await client(stub_stack)
    created = await api.CreateTaskGraph(
        pb.CreateTaskGraphRequest(project_id=PROJECT, tasks=tasks("t", agent="busy"))
    )
    graph_id = created.task_graph.id

    async def running_task() -> pb.Task | None:
        reply = await api.GetTaskGraph(
            pb.GetTaskGraphRequest(project_id=PROJECT, task_graph_id=graph_id)
        )
        (task,) = reply.task_graph.tasks
        return task if task.status == pb.TASK_STATUS_IN_PROGRESS and task.last_run_id else None

    task = await wait_for(running_task, "the in-progress task to show its run")
    status = await db_pool.fetchval(
        "SELECT status FROM kb.agent_runs WHERE id = $1::uuid", task.last_run_id
    )
    assert status in ("queued", "running")  # the attempt's run, before it ends
    await api.CancelTaskGraph(pb.CancelTaskGraphRequest(project_id=PROJECT, task_graph_id=graph_id))


async def test_the_dispatchers_default_task_timeout_applies_to_tasks_naming_none(
    database_url: str, db_pool: asyncpg.Pool, gemini_stub: GeminiStub
) -> None:
    await define(db_pool, "quick", default_timeout_s=600)
    gemini_stub.add_script(Script(name="quick", policy=lambda r: Reply(text="ok")))
    stack = await start_stack(
        database_url=database_url,
        pool=db_pool,
        environ={
            "AGENTFLEET_GEMINI_BASE_URL": gemini_stub.base_url or "",
            "AGENTFLEET_DISPATCHER_TASK_TIMEOUT_S": "42.5",
        },
    )
    try:
        api = await client(stack)
        named = tasks("named", agent="quick")[0]
        named.timeout.FromSeconds(7)
        created = await api.CreateTaskGraph(
            pb.CreateTaskGraphRequest(
                project_id=PROJECT, tasks=[*tasks("plain", agent="quick"), named]
            )
        )
        graph = await wait_graph(api, created.task_graph.id)
        timeouts = {
            task.spec.key: float(
                await db_pool.fetchval(
                    "SELECT extract(epoch FROM timeout) FROM kb.agent_runs WHERE id = $1::uuid",
                    task.last_run_id,
                )
            )
            for task in graph.tasks
        }
        assert timeouts == {"plain": 42.5, "named": 7.0}
    finally:
        await stack.close()
