"""Seed 003's step-limit, timeout and doom-loop scenarios (one test each, named after the
scenario), driven by stub Gemini scripts against a real database; tools are in-memory."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from agentfleet import events
from agentfleet.errors import FailedPrecondition
from agentfleet.gemini_stub import Call, GeminiStub, Reply, Script
from agentfleet.gemini_stub.request import StubRequest
from agentfleet.testing.gemini import model_client_for
from services.executor.queue import RESUME_LEASE_OWNER, RunQueue
from services.executor.registry.definitions import AgentDefinition, DefinitionRepository
from services.executor.registry.model_config import ModelConfig
from services.executor.run_path.loop import AgentLoop, RunControl
from services.executor.run_path.resume import ResumeParams, resume_run
from services.executor.runs import RunRecord, StartRunParams
from services.executor.safety import STEP_LIMIT_MESSAGE, TIMEOUT_MESSAGE
from services.executor.tools.tool_gateway import InMemoryToolGateway

PROJECT = "proj"
OWNER = "safety-worker"


async def _add(args: dict[str, Any]) -> dict[str, Any]:
    return {"sum": args.get("a", 0) + args.get("b", 0)}


@pytest.fixture
async def harness(db_pool: asyncpg.Pool, gemini_stub: GeminiStub) -> AsyncIterator[Harness]:
    model = model_client_for(gemini_stub)
    try:
        yield Harness(db_pool, gemini_stub, model)
    finally:
        await model.aclose()


class Harness:
    def __init__(self, pool: asyncpg.Pool, stub: GeminiStub, model: Any) -> None:
        self.pool = pool
        self.stub = stub
        self.model = model
        self.hang_started = asyncio.Event()

        async def hang(args: dict[str, Any]) -> dict[str, Any]:
            self.hang_started.set()
            await asyncio.Event().wait()
            raise AssertionError("unreachable")

        self.tools = InMemoryToolGateway(tools={"add": _add, "hang": hang})

    async def run(
        self,
        *,
        max_steps: int | None = None,
        default_timeout_s: float | None = None,
        request_timeout_s: float | None = None,
        depth: int = 0,
        grace_s: float = 5.0,
    ) -> RunRecord:
        """Defines the agent, queues and claims a run (a child run when depth=1), executes it."""
        definition = AgentDefinition(
            name="agent",
            system_prompt="You are agent.",
            model=ModelConfig(name="m"),
            tools=["add", "hang"],
            max_steps=max_steps,
            default_timeout_s=default_timeout_s,
        )
        stored = await DefinitionRepository(self.pool).upsert(PROJECT, definition)
        queue = RunQueue(self.pool)
        run, _ = await queue.enqueue(
            StartRunParams(
                project_id=PROJECT,
                agent_name="agent",
                agent_definition_id=str(stored.definition.id),
                input="go",
                timeout_s=request_timeout_s,
            )
        )
        if depth:
            parent, _ = await queue.enqueue(
                StartRunParams(
                    project_id=PROJECT, agent_name="agent", agent_definition_id=None, input="parent"
                )
            )
            await self.pool.execute(
                "UPDATE kb.agent_runs SET parent_run_id = $2, root_run_id = $2, depth = 1, "
                "created_at = now() - interval '1 hour' WHERE id = $1",
                run.id,
                parent.id,
            )
        (claimed,) = await queue.claim_next(OWNER, 30.0)
        assert claimed.id == run.id
        loop = AgentLoop(
            pool=self.pool,
            definitions=DefinitionRepository(self.pool),
            tools=self.tools,
            model=self.model,
            owner=OWNER,
            timeout_grace_s=grace_s,
        )
        finished = await loop.execute(claimed, RunControl())
        assert finished is not None
        return finished

    async def events(self, run_id: str) -> list[events.RunEvent]:
        stored = await events.read_events(
            self.pool, project_id=PROJECT, run_id=run_id, include_internal=True
        )
        assert [e.seq for e in stored] == list(range(1, len(stored) + 1))
        return [e.event for e in stored]

    async def safety(self, run_id: str) -> list[events.Safety]:
        return [e for e in await self.events(run_id) if isinstance(e, events.Safety)]

    async def calls(self, run_id: str) -> list[tuple[str, str]]:
        rows = await self.pool.fetch(
            "SELECT tool_name, status FROM kb.agent_run_tool_calls WHERE run_id = $1 "
            "ORDER BY step_number, created_at",
            run_id,
        )
        return [(r["tool_name"], r["status"]) for r in rows]


def tireless(request: StubRequest) -> Reply:
    """A model that never stops calling tools while it has any; with none, it summarizes."""
    if request.tool_names:
        return Reply(text=f"working {request.turn}", calls=[Call("add", {"a": request.turn})])
    return Reply(text=f"summary after {request.turn} turns")


def stubborn(request: StubRequest) -> Reply:
    """A model that calls a tool even when told to stop and given no tools."""
    return Reply(text=f"still working {request.turn}", calls=[Call("add", {"a": request.turn})])


def assert_answered(all_events: list[events.RunEvent]) -> None:
    requests = [e.tool_call_id for e in all_events if isinstance(e, events.ToolRequest)]
    responses = [e.tool_call_id for e in all_events if isinstance(e, events.ToolResponse)]
    assert sorted(requests) == sorted(responses)
    assert len(set(responses)) == len(responses)


# -- Requirement: Step Limit Enforcement ------------------------------------------------


async def test_sub_agent_default_step_limit(harness: Harness) -> None:
    harness.stub.add_script(Script(name="agent", policy=tireless))
    run = await harness.run(depth=1)
    assert run.depth == 1
    assert run.status == "paused"
    assert run.step_count == run.total_steps == 50
    assert len(harness.tools.calls) == 50
    (safety,) = await harness.safety(run.id)
    assert safety.kind == "step_limit"
    assert safety.details["max_steps"] == 50


async def test_top_level_agent_unlimited_steps(harness: Harness) -> None:
    def sixty_then_done(request: StubRequest) -> Reply:
        if request.turn < 60:
            return Reply(calls=[Call("add", {"a": request.turn})])
        return Reply(text="done after 60 tool steps")

    harness.stub.add_script(Script(name="agent", policy=sixty_then_done))
    run = await harness.run(max_steps=None)
    assert run.status == "completed"
    assert run.step_count == 61
    assert run.summary == "done after 60 tool steps"
    assert await harness.safety(run.id) == []


async def test_soft_stop_at_step_limit(harness: Harness) -> None:
    harness.stub.add_script(Script(name="agent", policy=tireless))
    run = await harness.run(max_steps=3)
    assert run.status == "paused"
    assert run.summary == "summary after 3 turns"
    assert run.step_count == run.total_steps == 3  # the summary call is not a step
    assert len(harness.tools.calls) == 3
    last = harness.stub.requests[-1]
    assert last.tool_names == []  # tools disabled for the final iteration
    assert last.last_user_text() == STEP_LIMIT_MESSAGE
    assert len(harness.stub.requests) == 4
    (safety,) = await harness.safety(run.id)
    assert (safety.kind, safety.details["max_steps"]) == ("step_limit", 3)
    all_events = await harness.events(run.id)
    assert_answered(all_events)
    change = [e for e in all_events if isinstance(e, events.StatusChanged)][-1]
    assert change.to_status == "paused"


async def test_hard_stop_after_soft_stop_ignored(harness: Harness) -> None:
    harness.stub.add_script(Script(name="agent", policy=stubborn))
    run = await harness.run(max_steps=2)
    assert run.status == "paused"
    # The tool ran for the two real steps only; the call after the soft stop was refused.
    assert len(harness.tools.calls) == 2
    assert await harness.calls(run.id) == [
        ("add", "completed"),
        ("add", "completed"),
        ("add", "refused"),
    ]
    assert run.summary == "still working 2"  # the partial summary is preserved
    kinds = [s.kind for s in await harness.safety(run.id)]
    assert kinds == ["step_limit", "call_after_soft_stop"]
    all_events = await harness.events(run.id)
    assert_answered(all_events)
    refused = [e for e in all_events if isinstance(e, events.ToolResponse)][-1]
    assert refused.status == "refused"
    assert "tools are disabled" in refused.error


# -- Requirement: Timeout Enforcement ---------------------------------------------------


async def test_timeout_with_graceful_shutdown(harness: Harness) -> None:
    harness.stub.add_script(
        Script(
            name="agent",
            replies=[
                Reply(text="calling the slow tool", calls=[Call("hang")]),
                Reply(text="time is up: I started the slow tool, no result yet"),
            ],
        )
    )
    run = await harness.run(default_timeout_s=0.5)
    assert run.status == "paused"
    assert run.summary == "time is up: I started the slow tool, no result yet"
    assert harness.hang_started.is_set()
    assert await harness.calls(run.id) == [("hang", "interrupted")]
    last = harness.stub.requests[-1]
    assert last.tool_names == []
    assert last.last_user_text() == TIMEOUT_MESSAGE
    (safety,) = await harness.safety(run.id)
    assert safety.kind == "timeout"
    assert safety.details["timeout_s"] == 0.5
    all_events = await harness.events(run.id)
    assert_answered(all_events)
    response = next(e for e in all_events if isinstance(e, events.ToolResponse))
    assert response.status == "interrupted"
    assert "deadline" in response.error


async def test_hard_timeout_after_grace_period(harness: Harness) -> None:
    harness.stub.add_script(
        Script(
            name="agent",
            replies=[
                Reply(text="partial progress", calls=[Call("add", {"a": 1})]),
                Reply(hang=True),  # the step in flight at the deadline
                Reply(hang=True),  # no summary within the grace period either
            ],
        )
    )
    loop_time = asyncio.get_running_loop().time
    began = loop_time()
    run = await harness.run(default_timeout_s=0.5, grace_s=0.3)
    assert loop_time() - began < 3.0
    assert run.status == "paused"
    assert run.summary == "partial progress"  # partial results preserved
    # Every model call sent counts as a step, the one the deadline cut too (2 on an idle
    # machine; 1 when the deadline came during step 1's tool), the summary call never does.
    sent = len(harness.stub.requests)
    assert run.step_count == run.total_steps == sent - 1 >= 1
    (safety,) = await harness.safety(run.id)
    assert safety.kind == "timeout"
    change = [e for e in await harness.events(run.id) if isinstance(e, events.StatusChanged)][-1]
    assert change.to_status == "paused"
    assert "no summary" in change.reason


async def test_spawn_timeout_overrides_definition_timeout(harness: Harness) -> None:
    harness.stub.add_script(
        Script(name="agent", replies=[Reply(text="slow", delay_s=10.0), Reply(text="summary")])
    )
    loop_time = asyncio.get_running_loop().time
    began = loop_time()
    run = await harness.run(default_timeout_s=60.0, request_timeout_s=0.4)
    assert loop_time() - began < 5.0
    assert run.status == "paused"
    assert run.summary == "summary"
    (safety,) = await harness.safety(run.id)
    assert safety.details["timeout_s"] == 0.4


# -- Requirement: Doom Loop Detection ---------------------------------------------------


async def test_doom_loop_detection_threshold(harness: Harness) -> None:
    same = Call("add", {"a": 1, "b": 2})
    harness.stub.add_script(
        Script(
            name="agent",
            replies=[
                Reply(calls=[same]),
                Reply(calls=[same]),
                Reply(calls=[same]),
                Reply(text="I will stop here."),
            ],
        )
    )
    run = await harness.run()
    assert run.status == "completed"
    assert len(harness.tools.calls) == 2  # the third identical call was not executed
    assert await harness.calls(run.id) == [
        ("add", "completed"),
        ("add", "completed"),
        ("add", "refused"),
    ]
    sent = harness.stub.requests[-1].function_responses()[-1]["response"]
    assert "try a different approach" in sent["error"]
    (safety,) = await harness.safety(run.id)
    assert (safety.kind, safety.details["repeats"]) == ("doom_loop_warning", 3)


async def test_hard_stop_after_continued_looping(harness: Harness) -> None:
    same = Call("add", {"b": 2, "a": 1})
    harness.stub.add_script(Script(name="agent", replies=[Reply(calls=[same])] * 5))
    run = await harness.run()
    assert run.status == "failed"
    assert "doom loop" in (run.error_message or "")
    assert run.completed_at is not None
    assert len(harness.tools.calls) == 2
    assert [s for _, s in await harness.calls(run.id)] == ["completed"] * 2 + ["refused"] * 3
    kinds = [s.kind for s in await harness.safety(run.id)]
    assert kinds == ["doom_loop_warning", "doom_loop_warning", "doom_loop_stop"]
    assert_answered(await harness.events(run.id))


async def test_hard_stop_counts_calls_within_one_reply_in_order(harness: Harness) -> None:
    harness.stub.add_script(
        Script(name="agent", replies=[Reply(calls=[Call("add", {"a": 1})] * 5)])
    )
    run = await harness.run()
    assert run.status == "failed"
    assert "doom loop" in (run.error_message or "")
    assert harness.tools.calls == []  # the reply that reached 5 runs none of its calls
    assert {s for _, s in await harness.calls(run.id)} == {"refused"}


async def test_non_identical_calls_reset_counter(harness: Harness) -> None:
    a = Call("add", {"a": 1})
    harness.stub.add_script(
        Script(
            name="agent",
            replies=[
                Reply(calls=[a]),
                Reply(calls=[a]),
                Reply(calls=[a]),  # 3rd: warned, not executed
                Reply(calls=[Call("add", {"a": 2})]),  # different arguments: count back to 1
                Reply(calls=[a]),
                Reply(calls=[a]),
                Reply(text="done"),
            ],
        )
    )
    run = await harness.run()
    assert run.status == "completed"
    assert [s for _, s in await harness.calls(run.id)] == [
        "completed",
        "completed",
        "refused",
        "completed",
        "completed",
        "completed",
    ]
    assert len(harness.tools.calls) == 5
    assert [s.kind for s in await harness.safety(run.id)] == ["doom_loop_warning"]


# -- ResumeRun and the global cap -------------------------------------------------------


async def _resume_and_execute(harness: Harness, run_id: str, text: str) -> RunRecord:
    resumed = await resume_run(
        harness.pool, ResumeParams(project_id=PROJECT, run_id=run_id, input=text)
    )
    assert resumed.run.status == "running"
    (claim,) = await RunQueue(harness.pool).claim(OWNER, 30.0)
    claimed = claim.run
    assert claim.previous_owner == RESUME_LEASE_OWNER
    loop = AgentLoop(
        pool=harness.pool,
        definitions=DefinitionRepository(harness.pool),
        tools=harness.tools,
        model=harness.model,
        owner=OWNER,
    )
    finished = await loop.execute(claimed, RunControl(resumed=True))
    assert finished is not None
    return finished


async def test_resume_twice_continues_the_conversation_and_counts_total_steps(
    harness: Harness,
) -> None:
    harness.stub.add_script(Script(name="agent", policy=tireless))
    first = await harness.run(max_steps=2)
    assert (first.status, first.total_steps, first.resume_count) == ("paused", 2, 0)
    second = await _resume_and_execute(harness, first.id, "keep going")
    assert (second.status, second.step_count, second.total_steps) == ("paused", 2, 4)
    third = await _resume_and_execute(harness, first.id, "")
    assert (third.status, third.step_count, third.total_steps, third.resume_count) == (
        "paused",
        2,
        6,
        2,
    )
    # Each model call saw the whole persisted conversation: the previous request plus what
    # happened since, never a rebuilt or reordered history.
    requests = harness.stub.requests
    for before, after in itertools.pairwise(requests):
        assert after.contents[: len(before.contents)] == before.contents
    texts = [r.last_user_text() for r in requests]
    assert "keep going" in texts
    assert "continue" in texts
    all_events = await harness.events(first.id)
    assert_answered(all_events)
    started = [e for e in all_events if isinstance(e, events.RunStarted)]
    assert [(s.resumed, s.recovered) for s in started] == [
        (False, False),
        (True, False),
        (True, False),
    ]
    await resume_run(harness.pool, ResumeParams(project_id=PROJECT, run_id=first.id))
    with pytest.raises(FailedPrecondition, match="only a paused run"):
        await resume_run(harness.pool, ResumeParams(project_id=PROJECT, run_id=first.id))


async def test_resume_is_refused_at_the_500_step_cap(harness: Harness) -> None:
    harness.stub.add_script(Script(name="agent", policy=tireless))
    run = await harness.run(max_steps=1)
    await harness.pool.execute("UPDATE kb.agent_runs SET total_steps = 498 WHERE id = $1", run.id)
    await harness.pool.execute("UPDATE kb.agent_definitions SET max_steps = 10")
    with pytest.raises(FailedPrecondition, match="past MAX_TOTAL_STEPS 500"):
        await resume_run(harness.pool, ResumeParams(project_id=PROJECT, run_id=run.id, max_steps=5))
    # Without an explicit budget the cap clamps the resume: two steps, then the soft stop.
    resumed = await _resume_and_execute(harness, run.id, "finish up")
    assert (resumed.status, resumed.total_steps) == ("paused", 500)
    assert [s.kind for s in await harness.safety(run.id)][-1] == "total_step_cap"
    with pytest.raises(FailedPrecondition, match="MAX_TOTAL_STEPS cap of 500"):
        await resume_run(harness.pool, ResumeParams(project_id=PROJECT, run_id=run.id))


# -- ResumeRun request_id idempotency ---------------------------------------------------


async def _resume_state(harness: Harness, run_id: str) -> tuple[str, int, int]:
    row = await harness.pool.fetchrow(
        "SELECT status, resume_count, (SELECT count(*) FROM kb.agent_run_messages m "
        "WHERE m.run_id = r.id) AS messages FROM kb.agent_runs r WHERE id = $1::uuid",
        run_id,
    )
    return row["status"], row["resume_count"], row["messages"]


async def test_resume_replays_the_same_request_id_and_refuses_another(harness: Harness) -> None:
    harness.stub.add_script(Script(name="agent", policy=tireless))
    run = await harness.run(max_steps=1)
    params = ResumeParams(project_id=PROJECT, run_id=run.id, input="more", request_id="res-1")
    first = await resume_run(harness.pool, params)
    after_first = await _resume_state(harness, run.id)
    assert after_first[:2] == ("running", 1)

    again = await resume_run(harness.pool, params)
    # The replay streams the same execution: from the same STATUS_CHANGED, nothing written.
    assert again.after_seq == first.after_seq
    assert await _resume_state(harness, run.id) == after_first
    (changed,) = [
        e
        for e in await harness.events(run.id)
        if isinstance(e, events.StatusChanged) and e.from_status == "paused"
    ]
    assert changed.reason == "resumed (request_id res-1)"

    other = ResumeParams(project_id=PROJECT, run_id=run.id, request_id="res-2")
    with pytest.raises(FailedPrecondition, match="only a paused run"):
        await resume_run(harness.pool, other)
    assert await _resume_state(harness, run.id) == after_first


async def test_resume_request_id_is_not_matched_in_a_cancel_reason(harness: Harness) -> None:
    """A cancel reason is free text: one reading like a resume's ("resumed (request_id x)")
    once made ResumeRun(request_id x) of the cancelled run answer as a replay."""
    harness.stub.add_script(Script(name="agent", policy=tireless))
    run = await harness.run(max_steps=1)
    await RunQueue(harness.pool).request_cancel(PROJECT, run.id, "resumed (request_id res-x)")
    cancelled = await _resume_state(harness, run.id)
    assert cancelled[:2] == ("cancelled", 0)
    seqs = [
        e.seq for e in await events.read_events(harness.pool, project_id=PROJECT, run_id=run.id)
    ]

    params = ResumeParams(project_id=PROJECT, run_id=run.id, request_id="res-x")
    with pytest.raises(FailedPrecondition, match="is cancelled"):
        await resume_run(harness.pool, params)
    assert await _resume_state(harness, run.id) == cancelled
    after = await events.read_events(harness.pool, project_id=PROJECT, run_id=run.id)
    assert [e.seq for e in after] == seqs
