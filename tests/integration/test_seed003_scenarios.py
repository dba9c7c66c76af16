"""Parts of seed 003's scenarios that no other test asserts, on the real database and the
stub model: a spawn's timeout overrides the child's definition, a run's duration is its
wall-clock time, the definition's model name is the one called, and a child spawned
without max_steps stops at the sub-agent default of 50 steps."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest

from agentfleet.gemini_stub import Call, GeminiStub, Reply, Script, StubRequest
from services.executor.registry.model_config import ModelConfig
from services.executor.safety import SUB_AGENT_DEFAULT_MAX_STEPS
from tests.integration.coordination_harness import Executor, running_executor


@pytest.fixture
async def fleet(db_pool: asyncpg.Pool, database_url: str, gemini_stub: GeminiStub) -> Any:
    async with running_executor(db_pool, database_url, gemini_stub, workers=2) as executor:
        yield executor


def script(name: str, *replies: Reply) -> Script:
    return Script(name=name, match_system=f"You are {name}.", replies=replies)


def spawn_once(task: dict[str, Any]) -> Any:
    """A parent that spawns ``task`` once, then answers."""

    def parent(request: StubRequest) -> Reply:
        if request.turn == 0:
            return Reply(calls=[Call("spawn_agents", {"tasks": [task]})])
        return Reply(text="parent done")

    return parent


async def test_a_spawns_timeout_overrides_the_childs_definition(fleet: Executor) -> None:
    await fleet.define("parent", tools=["spawn_agents"])
    await fleet.define("child", default_timeout_s=600.0)
    fleet.stub.add_script(
        Script(
            name="parent",
            match_system="You are parent.",
            policy=spawn_once({"agent_name": "child", "prompt": "x", "timeout_s": 0.5}),
        )
    )
    fleet.stub.add_script(script("child", Reply(hang=True), Reply(text="child summary")))
    root = await fleet.start("parent")
    final = await fleet.wait(root.id, timeout_s=20)
    assert final.status == "completed", final.error_message
    (child,) = await fleet.children(root.id)
    assert (child.status, child.summary) == ("paused", "child summary")
    safety = [e for e in await fleet.events(child.id) if e.type == "safety"]
    assert [(e.kind, e.details["timeout_s"]) for e in safety] == [("timeout", 0.5)]


async def test_a_runs_duration_is_its_wall_clock_time(fleet: Executor) -> None:
    await fleet.define("slow")
    fleet.stub.add_script(script("slow", Reply(text="done", delay_s=0.8)))
    run = await fleet.wait((await fleet.start("slow")).id)
    assert run.status == "completed"
    assert run.started_at is not None
    assert run.completed_at is not None
    assert run.duration_ms is not None
    assert run.duration_ms >= 800
    wall_ms = (run.completed_at - run.started_at).total_seconds() * 1000
    assert abs(run.duration_ms - wall_ms) < 250


async def test_the_definitions_model_and_settings_are_the_ones_called(fleet: Executor) -> None:
    await fleet.define("named", model=ModelConfig(name="gemini-audit-model", temperature=0.7))
    fleet.stub.add_script(script("named", Reply(text="ok")))
    run = await fleet.wait((await fleet.start("named")).id)
    assert run.status == "completed", run.error_message
    (request,) = fleet.stub.requests_for("named")
    assert request.model == "gemini-audit-model"
    assert request.generation_config["temperature"] == 0.7


async def test_a_child_spawned_without_max_steps_stops_at_the_sub_agent_default(
    fleet: Executor,
) -> None:
    await fleet.define("parent", tools=["spawn_agents"])
    await fleet.define("worker", tools=["echo"])

    def worker(request: StubRequest) -> Reply:
        if request.tool_names:
            return Reply(calls=[Call("echo", {"n": request.turn})])
        return Reply(text="worker summary")  # the soft stop's call, with no tools

    fleet.stub.add_script(
        Script(
            name="parent",
            match_system="You are parent.",
            policy=spawn_once({"agent_name": "worker", "prompt": "x"}),
        )
    )
    fleet.stub.add_script(Script(name="worker", match_system="You are worker.", policy=worker))
    root = await fleet.start("parent")
    final = await fleet.wait(root.id, timeout_s=60)
    assert final.status == "completed", final.error_message
    (child,) = await fleet.children(root.id)
    assert (child.status, child.step_count, child.summary) == (
        "paused",
        SUB_AGENT_DEFAULT_MAX_STEPS,
        "worker summary",
    )
    assert SUB_AGENT_DEFAULT_MAX_STEPS == 50
