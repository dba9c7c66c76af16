"""Flow runs (sequential, loop, parallel) under the limits of seed 003 that single runs
have: a timeout (from the definition or the request) pauses the flow with its output so
far, resuming it continues the paused member, and a cancel keeps the output so far as the
summary. One process, the real database and the stub model."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest

from agentfleet.gemini_stub import Call, GeminiStub, Reply, Script, StubRequest
from services.executor.coordination.tree import cancel_tree
from services.executor.run_path.resume import RESUME_NOTE, ResumeParams, resume_run
from services.executor.safety import TIMEOUT_MESSAGE
from tests.integration.coordination_harness import PROJECT, Executor, running_executor


@pytest.fixture
async def fleet(db_pool: asyncpg.Pool, database_url: str, gemini_stub: GeminiStub) -> Any:
    async with running_executor(db_pool, database_url, gemini_stub, workers=2) as executor:
        yield executor


def echo(fleet: Executor, name: str) -> None:
    """A member that answers ``name(<its input>)`` at once."""
    fleet.stub.add_script(
        Script(
            name=name,
            match_system=f"You are {name}.",
            policy=lambda r: Reply(text=f"{name}({r.last_user_text()})"),
        )
    )


def slow(fleet: Executor, name: str) -> None:
    """A member that never answers until its timeout asks for a summary, and finishes
    when it is resumed."""

    def policy(request: StubRequest) -> Reply:
        text = request.last_user_text()
        if text == TIMEOUT_MESSAGE:
            return Reply(text=f"{name} partial")
        if text == RESUME_NOTE:
            return Reply(text=f"{name} done")
        return Reply(hang=True)

    fleet.stub.add_script(Script(name=name, match_system=f"You are {name}.", policy=policy))


async def timeout_events(fleet: Executor, run_id: str) -> list[float]:
    return [
        e.details["timeout_s"]
        for e in await fleet.events(run_id)
        if e.type == "safety" and e.kind == "timeout"
    ]


@pytest.mark.parametrize(
    ("flow", "timeout_from"),
    [("sequential", "definition"), ("loop", "request"), ("sequential", "request")],
)
async def test_a_flow_pauses_at_its_timeout_and_resumes_where_it_stopped(
    fleet: Executor, flow: str, timeout_from: str
) -> None:
    by_definition = {"default_timeout_s": 1.0} if timeout_from == "definition" else {}
    await fleet.define(
        "pipeline",
        flow_type=flow,
        sub_agents=["slow", "after"],
        max_iterations=1 if flow == "loop" else None,
        **by_definition,
    )
    # The member's own default is longer than the flow's: the flow's time left wins.
    await fleet.define("slow", default_timeout_s=600.0)
    await fleet.define("after")
    slow(fleet, "slow")
    echo(fleet, "after")
    by_request = {"timeout_s": 1.0} if timeout_from == "request" else {}
    root = await fleet.start("pipeline", "in", **by_request)

    paused = await fleet.wait(root.id)
    assert (paused.status, paused.summary) == ("paused", "slow partial")
    (member,) = await fleet.children(root.id)
    assert (member.agent_name, member.status) == ("slow", "paused")
    assert member.timeout is not None
    assert member.timeout.total_seconds() <= 1.0
    assert await timeout_events(fleet, root.id) == [1.0]

    await resume_run(fleet.pool, ResumeParams(project_id=PROJECT, run_id=root.id, timeout_s=60))
    final = await fleet.wait(root.id, statuses=("completed", "failed", "cancelled"))
    assert (final.status, final.summary) == ("completed", "after(slow done)")
    members = await fleet.children(root.id)
    assert [(c.agent_name, c.status) for c in members] == [
        ("slow", "completed"),
        ("after", "completed"),
    ]
    assert members[0].resume_count == 1


async def test_a_parallel_flow_pauses_at_its_timeout_with_every_members_output(
    fleet: Executor,
) -> None:
    await fleet.define(
        "fanout", flow_type="parallel", sub_agents=["fast", "slow"], default_timeout_s=1.0
    )
    await fleet.define("fast")
    await fleet.define("slow")
    echo(fleet, "fast")
    slow(fleet, "slow")
    root = await fleet.start("fanout", "in")

    paused = await fleet.wait(root.id)
    assert paused.status == "paused"
    assert paused.summary == "## fast\nfast(in)\n\n## slow (paused at the timeout)\nslow partial"
    assert await timeout_events(fleet, root.id) == [1.0]

    await resume_run(fleet.pool, ResumeParams(project_id=PROJECT, run_id=root.id, timeout_s=60))
    final = await fleet.wait(root.id, statuses=("completed", "failed", "cancelled"))
    assert (final.status, final.summary) == (
        "completed",
        "## fast\nfast(in)\n\n## slow\nslow done",
    )
    members = sorted(await fleet.children(root.id), key=lambda c: c.agent_name)
    assert [(c.agent_name, c.status, c.resume_count) for c in members] == [
        ("fast", "completed", 0),
        ("slow", "completed", 1),
    ]


@pytest.mark.parametrize("flow", ["sequential", "parallel"])
async def test_a_cancelled_flow_keeps_the_output_so_far_as_its_summary(
    fleet: Executor, flow: str
) -> None:
    members = ["first", "second"]
    await fleet.define("pipeline", flow_type=flow, sub_agents=members)
    await fleet.define("first")
    await fleet.define("second")
    echo(fleet, "first")
    fleet.stub.add_script(
        Script(name="second", match_system="You are second.", policy=lambda r: Reply(hang=True))
    )
    root = await fleet.start("pipeline", "in")
    # The first member has completed (and been seen by the flow) and the second is running.
    await fleet.wait_until(
        "SELECT count(*) = 1 FROM kb.agent_run_events WHERE run_id = $1 "
        "AND type = 'child_run_finished'",
        root.id,
    )
    await fleet.wait_until(
        "SELECT count(*) = 1 FROM kb.agent_runs WHERE parent_run_id = $1 "
        "AND agent_name = 'second' AND status = 'running'",
        root.id,
    )
    await cancel_tree(fleet.queue, fleet.pool, PROJECT, root.id, "user said stop")

    final = await fleet.wait(root.id)
    expected = "first(in)" if flow == "sequential" else "## first\nfirst(in)"
    assert (final.status, final.summary) == ("cancelled", expected)


async def test_a_member_paused_by_its_own_step_limit_fails_the_flow_unresumed(
    fleet: Executor,
) -> None:
    """Only a member an earlier execution left paused is resumed; one that pauses now, at
    its own step limit, ends the flow as before (failed, naming it)."""
    await fleet.define("pipeline", flow_type="sequential", sub_agents=["busy"])
    await fleet.define("busy", tools=["echo"], max_steps=1)

    def busy(request: StubRequest) -> Reply:
        if request.tool_names:
            return Reply(calls=[Call("echo", {"n": request.turn})])
        return Reply(text="busy summary")  # the soft stop's call, with no tools

    fleet.stub.add_script(Script(name="busy", match_system="You are busy.", policy=busy))
    final = await fleet.wait((await fleet.start("pipeline", "in")).id)
    assert final.status == "failed"
    assert "member 'busy'" in (final.error_message or "")
    assert "ended paused" in (final.error_message or "")
    (member,) = await fleet.children(final.id)
    assert (member.status, member.resume_count) == ("paused", 0)
