"""The single-flow agent loop against the stub Gemini server and a real database, with an
in-memory ToolGateway (the gRPC ToolPool path is covered end to end in tests/e2e)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import pytest

from agentfleet import events
from agentfleet.gemini_stub import Call, GeminiStub, Reply, Script
from agentfleet.llm import RetryPolicy, content_to_json
from agentfleet.postgres import db
from agentfleet.testing.checks.invariants import assert_invariants
from agentfleet.testing.gemini import model_client_for
from agentfleet.testing.waiting import wait_for
from services.executor.queue import RunQueue
from services.executor.registry.definitions import AgentDefinition, DefinitionRepository
from services.executor.registry.model_config import ModelConfig
from services.executor.run_path.loop import AgentLoop, RunControl
from services.executor.run_path.recovery import load_conversation
from services.executor.runs import RunRecord, StartRunParams
from services.executor.store.tool_calls import OVERDUE_RUNS
from services.executor.tools.tool_gateway import InMemoryToolGateway

PROJECT = "proj"
OWNER = "test-worker"


async def _add(args: dict[str, Any]) -> dict[str, Any]:
    return {"sum": args["a"] + args["b"]}


async def _echo(args: dict[str, Any]) -> dict[str, Any]:
    return {"text": args["text"]}


def gateway(**extra: Any) -> InMemoryToolGateway:
    return InMemoryToolGateway(tools={"add": _add, "echo": _echo, **extra})


def blocking_tool() -> tuple[asyncio.Event, Callable[[dict[str, Any]], Awaitable[Any]]]:
    """A tool that never returns, and the event set once it has been called."""
    started = asyncio.Event()

    async def block(args: dict[str, Any]) -> dict[str, Any]:
        started.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    return started, block


async def claimed_run(
    pool: asyncpg.Pool, *, tools: list[str], agent: str = "helper", input: str = "go"
) -> RunRecord:
    definition = AgentDefinition(
        name=agent,
        system_prompt=f"You are {agent}.",
        model=ModelConfig(name="gemini-test", temperature=0.2, max_output_tokens=256),
        tools=tools,
    )
    stored = await DefinitionRepository(pool).upsert(PROJECT, definition)
    queue = RunQueue(pool)
    await queue.enqueue(
        StartRunParams(
            project_id=PROJECT,
            agent_name=agent,
            agent_definition_id=str(stored.definition.id),
            input=input,
        )
    )
    (run,) = await queue.claim_next(OWNER, 30.0)
    return run


_clients: list[Any] = []


def make_loop(
    pool: asyncpg.Pool, stub: GeminiStub, tools: InMemoryToolGateway, **kwargs: Any
) -> AgentLoop:
    model = model_client_for(stub, retry=kwargs.pop("retry", None))
    _clients.append(model)
    return AgentLoop(
        pool=pool,
        definitions=DefinitionRepository(pool),
        tools=tools,
        model=model,
        owner=OWNER,
        **kwargs,
    )


@pytest.fixture(autouse=True)
async def _close_model_clients() -> Any:
    yield
    while _clients:
        await _clients.pop().aclose()


async def stored_events(pool: asyncpg.Pool, run_id: str) -> list[events.PersistedEvent]:
    return await events.read_events(pool, project_id=PROJECT, run_id=run_id, include_internal=True)


async def test_two_calls_then_one_then_answer_is_persisted_exactly(
    db_pool: asyncpg.Pool, gemini_stub: GeminiStub, spans: Any
) -> None:
    gemini_stub.add_script(
        Script(
            name="helper",
            replies=[
                Reply(calls=[Call("add", {"a": 1, "b": 2}), Call("echo", {"text": "hi"})]),
                Reply(text="one more", calls=[Call("echo", {"text": "again"}, id="fc-1")]),
                Reply(text="The answer is 3."),
            ],
        )
    )
    run = await claimed_run(db_pool, tools=["add", "echo"])
    loop = make_loop(db_pool, gemini_stub, gateway())
    finished = await loop.execute(run, RunControl())

    assert finished is not None
    assert finished.status == "completed"
    assert finished.summary == "The answer is 3."
    assert finished.step_count == finished.total_steps == 3
    assert finished.tokens_in > 0
    assert finished.tokens_out > 0
    assert finished.completed_at is not None
    assert finished.duration_ms is not None
    assert finished.lease_owner is None
    assert finished.trace_id

    stored = await stored_events(db_pool, run.id)
    assert [e.seq for e in stored] == list(range(1, len(stored) + 1))
    assert [e.event.type for e in stored] == [
        "run_queued",
        "status_changed",
        "run_started",
        "tool_request",
        "tool_request",
        "tool_response",
        "tool_response",
        "model_text",
        "tool_request",
        "tool_response",
        "model_text",
        "status_changed",
        "run_finished",
    ]
    requests = [e.event for e in stored if isinstance(e.event, events.ToolRequest)]
    responses = [e.event for e in stored if isinstance(e.event, events.ToolResponse)]
    assert sorted(r.tool_call_id for r in requests) == sorted(r.tool_call_id for r in responses)
    assert {r.status for r in responses} == {"completed"}
    assert responses[0].result == {"output": {"sum": 3}}

    calls = await db_pool.fetch(
        "SELECT * FROM kb.agent_run_tool_calls WHERE run_id = $1 ORDER BY step_number, tool_name",
        run.id,
    )
    assert [(c["step_number"], c["tool_name"], c["status"]) for c in calls] == [
        (1, "add", "completed"),
        (1, "echo", "completed"),
        (2, "echo", "completed"),
    ]
    assert calls[0]["input"] == {"a": 1, "b": 2}
    assert calls[0]["output"] == {"output": {"sum": 3}}
    assert all(c["duration_ms"] is not None and c["message_id"] for c in calls)
    assert calls[2]["tool_call_id"] == "fc-1"

    # The conversation rebuilt from the messages table is exactly what the model was sent
    # on the last step, plus its final answer.
    system, contents = await load_conversation(db_pool, project_id=PROJECT, run_id=run.id)
    last_request = gemini_stub.requests[-1]
    assert system == last_request.system_instruction == "You are helper."
    sent = [content_to_json(c) for c in last_request.typed_contents()]
    assert [content_to_json(c) for c in contents[:-1]] == sent
    assert contents[-1].parts[0].text == "The answer is 3."  # type: ignore[index]
    assert last_request.tool_names == ["add", "echo"]
    assert last_request.generation_config["temperature"] == 0.2
    assert last_request.generation_config["maxOutputTokens"] == 256

    names = [s.name for s in spans.get_finished_spans()]
    assert "invoke_agent helper" in names
    assert {"step 1", "step 2", "step 3"} <= set(names)
    assert names.count("execute_tool echo") == 2
    run_span = next(s for s in spans.get_finished_spans() if s.name == "invoke_agent helper")
    assert format(run_span.context.trace_id, "032x") == finished.trace_id


async def test_a_tool_outside_the_whitelist_and_a_failing_tool_are_answered_as_errors(
    db_pool: asyncpg.Pool, gemini_stub: GeminiStub
) -> None:
    gemini_stub.add_script(
        Script(
            name="helper",
            replies=[
                Reply(calls=[Call("nope", {"x": 1}), Call("add", {"a": 1})]),
                Reply(text="I give up."),
            ],
        )
    )
    run = await claimed_run(db_pool, tools=["add"])
    finished = await make_loop(db_pool, gemini_stub, gateway()).execute(run, RunControl())
    assert finished is not None
    assert finished.status == "completed"
    responses = [
        e.event
        for e in await stored_events(db_pool, run.id)
        if isinstance(e.event, events.ToolResponse)
    ]
    assert [(r.tool_name, r.status) for r in responses] == [
        ("nope", "refused"),
        ("add", "failed"),  # the tool raised KeyError: a failed call, not a dead run
    ]
    assert "tool 'nope' is not allowed for this agent" in responses[0].error
    assert "add" in responses[0].error
    (refusal,) = [
        e.event for e in await stored_events(db_pool, run.id) if isinstance(e.event, events.Safety)
    ]
    assert (refusal.kind, refusal.details) == ("tool_not_allowed", {"tool_names": ["nope"]})
    sent = gemini_stub.requests[-1].function_responses()
    assert len(sent) == 2
    assert "error" in sent[0]["response"]


async def test_missing_whitelisted_tool_fails_the_run_at_start(
    db_pool: asyncpg.Pool, gemini_stub: GeminiStub
) -> None:
    run = await claimed_run(db_pool, tools=["add", "does_not_exist"])
    finished = await make_loop(db_pool, gemini_stub, gateway()).execute(run, RunControl())
    assert finished is not None
    assert finished.status == "failed"
    assert "does_not_exist" in (finished.error_message or "")
    assert finished.completed_at is not None
    assert finished.duration_ms is not None
    assert gemini_stub.requests == []
    types_ = [e.event.type for e in await stored_events(db_pool, run.id)]
    assert types_ == ["run_queued", "status_changed", "status_changed", "run_finished"]


async def test_rate_limit_then_success_is_retried(
    db_pool: asyncpg.Pool, gemini_stub: GeminiStub
) -> None:
    gemini_stub.add_script(
        Script(name="helper", replies=[Reply(error_status=429), Reply(text="fine")])
    )
    run = await claimed_run(db_pool, tools=[])
    finished = await make_loop(db_pool, gemini_stub, gateway()).execute(run, RunControl())
    assert finished is not None
    assert finished.status == "completed"
    assert finished.summary == "fine"
    assert gemini_stub.used("helper") == 2


async def test_five_server_errors_fail_the_run_with_the_model_error(
    db_pool: asyncpg.Pool, gemini_stub: GeminiStub
) -> None:
    gemini_stub.add_script(
        Script(
            name="helper",
            replies=[Reply(error_status=500, error_message="backend exploded")] * 5,
        )
    )
    run = await claimed_run(db_pool, tools=[])
    loop = make_loop(db_pool, gemini_stub, gateway(), retry=RetryPolicy.for_tests(5))
    finished = await loop.execute(run, RunControl())
    assert finished is not None
    assert finished.status == "failed"
    assert "500" in (finished.error_message or "")
    assert "backend exploded" in (finished.error_message or "")
    assert gemini_stub.used("helper") == 5


async def test_cancel_mid_tool_call_keeps_partial_output_and_answers_the_request(
    db_pool: asyncpg.Pool, gemini_stub: GeminiStub
) -> None:
    started, block = blocking_tool()
    gemini_stub.add_script(
        Script(name="helper", replies=[Reply(text="Working on it.", calls=[Call("block")])])
    )
    run = await claimed_run(db_pool, tools=["block"])
    control = RunControl()
    loop = make_loop(db_pool, gemini_stub, gateway(block=block))
    task = asyncio.create_task(loop.execute(run, control))
    async with asyncio.timeout(10):
        await started.wait()
    began = time.monotonic()
    control.cancel("cancelled by test")
    task.cancel()
    finished = await task
    assert time.monotonic() - began < 1.0
    assert finished is not None
    assert finished.status == "cancelled"
    assert finished.summary == "Working on it."
    stored = await stored_events(db_pool, run.id)
    response = next(e.event for e in stored if isinstance(e.event, events.ToolResponse))
    assert response.status == "failed"
    assert "cancelled by test" in response.error
    change = [e.event for e in stored if isinstance(e.event, events.StatusChanged)][-1]
    assert (change.to_status, change.reason) == ("cancelled", "cancelled by test")
    status = await db_pool.fetchval(
        "SELECT status FROM kb.agent_run_tool_calls WHERE run_id = $1", run.id
    )
    assert status == "failed"


async def test_unknown_agent_definition_fails_the_run(
    db_pool: asyncpg.Pool, gemini_stub: GeminiStub
) -> None:
    run = await claimed_run(db_pool, tools=[])
    await DefinitionRepository(db_pool).delete(PROJECT, "helper")
    finished = await make_loop(db_pool, gemini_stub, gateway()).execute(run, RunControl())
    assert finished is not None
    assert finished.status == "failed"
    assert "helper" in (finished.error_message or "")


async def test_cancel_on_takeover_answers_the_call_the_dead_worker_left_open(
    db_pool: asyncpg.Pool, gemini_stub: GeminiStub
) -> None:
    # The soak's case: the worker running a slow tool dies, CancelRun comes while nobody
    # holds the run, and the worker that takes it over is cancelled before its first step.
    started, block = blocking_tool()
    gemini_stub.add_script(
        Script(name="helper", replies=[Reply(text="Looking.", calls=[Call("block")])])
    )
    run = await claimed_run(db_pool, tools=["block"])
    dead = asyncio.create_task(
        make_loop(db_pool, gemini_stub, gateway(block=block)).execute(run, RunControl())
    )
    async with asyncio.timeout(10):
        await started.wait()
    dead.cancel()  # no cancel reason: a crash, the run stays running with the call open
    with pytest.raises(asyncio.CancelledError):
        await dead
    assert (
        await db_pool.fetchval(
            "SELECT status FROM kb.agent_run_tool_calls WHERE run_id = $1", run.id
        )
        == "started"
    )

    control = RunControl()
    control.cancel("cancelled by user")

    async def taken_over_then_cancelled() -> RunRecord | None:
        asyncio.current_task().cancel()  # type: ignore[union-attr]  # as the worker does
        return await make_loop(db_pool, gemini_stub, gateway(block=block)).execute(run, control)

    finished = await taken_over_then_cancelled_task(taken_over_then_cancelled)
    assert finished is not None
    assert (finished.status, finished.summary) == ("cancelled", "Looking.")
    stored = [e.event for e in await stored_events(db_pool, run.id)]
    (request,) = [e for e in stored if isinstance(e, events.ToolRequest)]
    (response,) = [e for e in stored if isinstance(e, events.ToolResponse)]
    assert response.tool_call_id == request.tool_call_id
    assert "interrupted" in response.error
    assert "cancelled by user" in response.error
    assert (
        await db_pool.fetchval(
            "SELECT status FROM kb.agent_run_tool_calls WHERE run_id = $1", run.id
        )
        == "interrupted"
    )
    _, conversation = await load_conversation(db_pool, project_id=PROJECT, run_id=run.id)
    answer = conversation[-1].parts[0].function_response  # the model sees it answered
    assert answer is not None
    assert answer.name == "block"
    await assert_invariants(db_pool, project_id=PROJECT)


async def taken_over_then_cancelled_task(
    body: Callable[[], Awaitable[RunRecord | None]],
) -> RunRecord | None:
    return await asyncio.create_task(body())


async def test_the_loop_reads_the_definition_the_run_carries_once(
    database_url: str, db_pool: asyncpg.Pool, gemini_stub: GeminiStub
) -> None:
    """StartRun resolves the agent's name to a definition at enqueue; the run carries its id
    (as the toolpool reads it) and the loop reads that definition once, by that id."""
    gemini_stub.add_script(Script(name="helper", replies=[Reply(text="done")]))
    run = await claimed_run(db_pool, tools=["add"])
    assert run.agent_definition_id is not None
    reads: list[tuple[Any, ...]] = []

    def log_definition_reads(record: Any) -> None:
        if "kb.agent_definitions" in record.query:
            reads.append(tuple(record.args or ()))

    async def init(conn: asyncpg.Connection) -> None:
        await db._init_connection(conn)
        conn.add_query_logger(log_definition_reads)

    counted = await asyncpg.create_pool(database_url, init=init, reset=db._keep_session)
    try:
        finished = await make_loop(counted, gemini_stub, gateway()).execute(run, RunControl())
    finally:
        await counted.close()
    assert finished is not None
    assert finished.status == "completed"
    assert reads == [(PROJECT, uuid.UUID(run.agent_definition_id))]


async def test_call_results_are_hot_updates(
    database_url: str, db_pool: asyncpg.Pool, gemini_stub: GeminiStub
) -> None:
    """A call's result (started -> completed) changes no column that an index of
    kb.agent_run_tool_calls names, so PostgreSQL updates the row in place (HOT) instead of
    adding an entry to each index for every call of every step."""
    gemini_stub.add_script(
        Script(
            name="helper",
            replies=[
                Reply(calls=[Call("add", {"a": 1, "b": 2}), Call("echo", {"text": "hi"})]),
                Reply(calls=[Call("echo", {"text": "again"})]),
                Reply(text="done"),
            ],
        )
    )
    own = await db.create_pool(database_url, min_size=1, max_size=4)
    try:
        run = await claimed_run(own, tools=["add", "echo"])
        finished = await make_loop(own, gemini_stub, gateway()).execute(run, RunControl())
    finally:
        await own.close()  # its backends exit, which flushes their table statistics
    assert finished is not None
    assert finished.status == "completed"
    counts = await wait_for(
        lambda: db_pool.fetchrow(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables "
            "WHERE relid = 'kb.agent_run_tool_calls'::regclass AND n_tup_upd >= 3"
        ),
        "the three results counted in pg_stat_user_tables",
    )
    assert (counts["n_tup_upd"], counts["n_tup_hot_upd"]) == (3, 3)


async def test_the_deadline_sweep_reads_the_awaiting_index(db_pool: asyncpg.Pool) -> None:
    """The sweep every worker runs each second finds overdue calls through the partial index
    of undecided calls with a deadline, not by reading every call of every project."""
    async with db_pool.acquire() as conn, conn.transaction():
        await conn.execute("SET LOCAL enable_seqscan = off")
        plan = await conn.fetchval(f"EXPLAIN (FORMAT JSON) {OVERDUE_RUNS}", 100)
    assert "agent_run_tool_calls_awaiting_idx" in json.dumps(plan)
