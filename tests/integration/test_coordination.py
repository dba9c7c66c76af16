"""Coordination in one process against the real database and the stub model: spawn_agents
(partial success, all failed, token budgets, resume_run_id, re-attach after a crash), the
depth rules, list_available_agents, flows, cancellation of a tree and one trace per tree.
The same on real processes: tests/e2e/test_coordination_processes.py."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest

from agentfleet.gemini_stub import Call, GeminiStub, Reply, Script, StubRequest, Usage
from agentfleet.testing.gemini import model_client_for
from services.executor.coordination.children import ChildRuns
from services.executor.coordination.coordination import Coordinator
from services.executor.coordination.tree import cancel_tree
from services.executor.run_path.loop import AgentLoop, RunControl
from tests.integration.coordination_harness import PROJECT, Executor, running_executor

SPAWN = ["spawn_agents", "list_available_agents"]


@pytest.fixture
async def fleet(db_pool: asyncpg.Pool, database_url: str, gemini_stub: GeminiStub) -> Any:
    async with running_executor(db_pool, database_url, gemini_stub, workers=2) as executor:
        yield executor


def script(name: str, *replies: Reply, per_conversation: bool = True) -> Script:
    return Script(
        name=name,
        match_system=f"You are {name}.",
        replies=replies,
        per_conversation=per_conversation,
    )


def spawn(*tasks: dict[str, Any], **extra: Any) -> Reply:
    return Reply(calls=[Call("spawn_agents", {"tasks": list(tasks), **extra})])


def spawn_output(request: StubRequest) -> dict[str, Any]:
    return request.function_responses()[-1]["response"]


async def test_partial_success_events_child_ids_tokens_and_one_trace(
    fleet: Executor, spans: Any
) -> None:
    await fleet.define("parent", tools=SPAWN, description="the boss")
    await fleet.define("worker", tools=["echo"], description="does work")
    await fleet.define("broken", tools=["missing_tool"])
    outputs: list[dict[str, Any]] = []

    def parent(request: StubRequest) -> Reply:
        if request.turn == 0:
            return Reply(calls=[Call("list_available_agents", {})])
        if request.turn == 1:
            return spawn(
                {"agent_name": "worker", "description": "a", "prompt": "task a"},
                {"agent_name": "worker", "description": "b", "prompt": "task b"},
                {"agent_name": "broken", "description": "c", "prompt": "task c"},
                {"agent_name": "nobody", "description": "d", "prompt": "task d"},
            )
        outputs.append(spawn_output(request))
        return Reply(text="done")

    fleet.stub.add_script(Script(name="parent", match_system="You are parent.", policy=parent))
    fleet.stub.add_script(
        script("worker", Reply(calls=[Call("echo", {"x": 1})]), Reply(text="worker result"))
    )
    root = await fleet.start("parent")
    final = await fleet.wait(root.id)
    assert final.status == "completed", final.error_message

    (catalog_call, spawn_call) = await fleet.tool_calls(root.id)
    agents = catalog_call["output"]["output"]["agents"]
    assert {a["name"] for a in agents} == {"worker", "broken"}  # never the caller
    assert all(set(a) == {"name", "description", "tools", "flow_type"} for a in agents)

    (output,) = outputs
    assert "error" not in output  # partial success is success
    results = output["output"]["results"]
    failed = output["output"]["failed"]
    assert [(r["description"], r["status"], r["summary"]) for r in results] == [
        ("a", "completed", "worker result"),
        ("b", "completed", "worker result"),
    ]
    assert sorted(f["description"] for f in failed) == ["c", "d"]
    assert any("missing_tool" in f["error"] for f in failed)
    assert any("nobody" in f["error"] for f in failed)

    children = await fleet.children(root.id)
    assert len(children) == 3
    assert sorted(map(str, spawn_call["child_run_ids"])) == sorted(c.id for c in children)
    assert {(c.depth, c.root_run_id, c.trace_id) for c in children} == {
        (1, root.id, final.trace_id)
    }
    kinds = [e.type for e in await fleet.events(root.id)]
    assert kinds.count("child_run_started") == 3
    assert kinds.count("child_run_finished") == 3
    assert final.tokens_total_tree == final.tokens_in + final.tokens_out + sum(
        c.tokens_total_tree for c in children
    )

    # One trace: every span of the tree, and each child run below the spawn span.
    finished = spans.get_finished_spans()
    assert {s.context.trace_id for s in finished} == {int(final.trace_id, 16)}
    spawn_span = next(s for s in finished if s.name == "execute_tool spawn_agents")
    child_spans = [s for s in finished if s.name in ("invoke_agent worker", "invoke_agent broken")]
    assert len(child_spans) == 3
    assert {s.parent.span_id for s in child_spans} == {spawn_span.context.span_id}
    assert any(s.name == "execute_tool echo" for s in finished)


async def test_all_children_failing_is_a_tool_error(fleet: Executor) -> None:
    await fleet.define("parent", tools=SPAWN)
    outputs: list[dict[str, Any]] = []

    def parent(request: StubRequest) -> Reply:
        if request.turn == 0:
            return spawn(
                {"agent_name": "ghost", "prompt": "x"}, {"agent_name": "ghost2", "prompt": "y"}
            )
        outputs.append(spawn_output(request))
        return Reply(text="nothing worked")

    fleet.stub.add_script(Script(name="parent", match_system="You are parent.", policy=parent))
    final = await fleet.wait((await fleet.start("parent")).id)
    assert final.status == "completed"
    (output,) = outputs
    assert output["error"].startswith("all sub-agents failed")
    assert len(output["output"]["failed"]) == 2


async def test_token_budget_pauses_child_with_summary_then_resume_run_id(fleet: Executor) -> None:
    await fleet.define("parent", tools=SPAWN)
    await fleet.define("worker", tools=["echo"])
    outputs: list[dict[str, Any]] = []

    def parent(request: StubRequest) -> Reply:
        if request.turn == 0:
            return spawn({"agent_name": "worker", "prompt": "big job"}, max_tokens_per_subtask=100)
        outputs.append(spawn_output(request))
        if request.turn == 1:
            child = outputs[0]["output"]["results"][0]["run_id"]
            return spawn(
                {"agent_name": "worker", "prompt": "go on", "resume_run_id": child},
                max_tokens_per_subtask=10_000,
            )
        return Reply(text="finished")

    expensive = Usage(prompt_tokens=80, candidates_tokens=40)

    def worker(request: StubRequest) -> Reply:
        text = request.last_user_text() or ""
        if "token budget reached" in text:
            return Reply(text="partial: half done", usage=expensive)
        if text == "go on":
            return Reply(text="all done")
        return Reply(calls=[Call("echo", {"n": request.turn})], usage=expensive)

    fleet.stub.add_script(Script(name="parent", match_system="You are parent.", policy=parent))
    fleet.stub.add_script(Script(name="worker", match_system="You are worker.", policy=worker))
    root = await fleet.start("parent")
    final = await fleet.wait(root.id)
    assert final.status == "completed", final.error_message
    first, second = outputs
    (paused,) = first["output"]["results"]
    assert (paused["status"], paused["summary"]) == ("paused", "partial: half done")
    (resumed,) = second["output"]["results"]
    assert resumed["run_id"] == paused["run_id"]
    assert (resumed["status"], resumed["summary"]) == ("completed", "all done")
    (child,) = await fleet.children(root.id)
    assert child.resume_count == 1
    safety = [e for e in await fleet.events(child.id) if e.type == "safety"]
    assert [e.kind for e in safety] == ["token_budget"]


async def test_depth_rules_and_self_spawn_stopped_by_the_cap(fleet: Executor) -> None:
    # "globber" sees spawn tools only through a glob: at depth 1 they are gone.
    await fleet.define("looper", tools=["spawn_agents"])
    await fleet.define("globber", tools=["*"])
    seen: dict[str, list[str]] = {}

    def looper(request: StubRequest) -> Reply:
        depth = (request.last_user_text() or "").count(">")
        seen.setdefault(f"looper-{depth}", request.tool_names)
        if request.turn == 0:
            calls = [
                Call(
                    "spawn_agents",
                    {"tasks": [{"agent_name": "looper", "prompt": ">" * (depth + 1)}]},
                )
            ]
            if depth == 0:
                calls.append(
                    Call("spawn_agents", {"tasks": [{"agent_name": "globber", "prompt": "g"}]})
                )
            return Reply(calls=calls)
        return Reply(text=f"depth {depth} done")

    def globber(request: StubRequest) -> Reply:
        seen.setdefault("globber", request.tool_names)
        if request.turn == 0:
            return spawn({"agent_name": "looper", "prompt": "x"})
        return Reply(text="globber done")

    fleet.stub.add_script(Script(name="looper", match_system="You are looper.", policy=looper))
    fleet.stub.add_script(Script(name="globber", match_system="You are globber.", policy=globber))
    root = await fleet.start("looper", "")
    final = await fleet.wait(root.id, timeout_s=20)
    assert final.status == "completed", final.error_message

    depths = await fleet.pool.fetch(
        "SELECT agent_name, depth, status FROM kb.agent_runs WHERE root_run_id = $1", root.id
    )
    assert max(r["depth"] for r in depths) == 2  # nothing below depth 2
    assert "spawn_agents" in seen["looper-1"]  # named exactly: kept at depth 1
    assert "spawn_agents" not in seen["looper-2"]  # depth 2: gone
    assert "spawn_agents" not in seen["globber"]  # a glob does not count below the top
    # Called anyway: refused with a SAFETY depth_refusal, never executed.
    for agent, depth in (("looper", 2), ("globber", 1)):
        run_id = next(
            str(r["id"])
            for r in await fleet.pool.fetch(
                "SELECT id FROM kb.agent_runs WHERE root_run_id = $1 AND agent_name = $2 "
                "AND depth = $3",
                root.id,
                agent,
                depth,
            )
        )
        (call,) = await fleet.tool_calls(run_id)
        assert call["status"] == "refused"
        assert call["child_run_ids"] == []
        assert "depth refusal" in call["error"]
        assert any(
            e.type == "safety" and e.kind == "depth_refusal" for e in await fleet.events(run_id)
        )


async def test_sequential_flow_chains_outputs(fleet: Executor) -> None:
    await fleet.define("pipeline", flow_type="sequential", sub_agents=["first", "second"])
    await fleet.define("first")
    await fleet.define("second")

    fleet.stub.add_script(
        Script(
            name="first",
            match_system="You are first.",
            policy=lambda r: Reply(text=f"1({r.last_user_text()})"),
        )
    )
    fleet.stub.add_script(
        Script(
            name="second",
            match_system="You are second.",
            policy=lambda r: Reply(text=f"2({r.last_user_text()})"),
        )
    )
    root = await fleet.start("pipeline", "in")
    final = await fleet.wait(root.id)
    assert (final.status, final.summary) == ("completed", "2(1(in))")
    assert final.tokens_in == 0  # a flow makes no model call
    assert [c.agent_name for c in await fleet.children(root.id)] == ["first", "second"]


async def test_loop_flow_ends_by_exit_loop_or_max_iterations(fleet: Executor) -> None:
    await fleet.define("until", flow_type="loop", sub_agents=["counter"], max_iterations=10)
    await fleet.define("capped", flow_type="loop", sub_agents=["stepper"], max_iterations=3)
    await fleet.define("counter", tools=["exit_loop"])
    await fleet.define("stepper")

    def counter(request: StubRequest) -> Reply:
        value = int(request.last_user_text() or "0") if request.turn == 0 else None
        if value is not None and value >= 2:
            return Reply(calls=[Call("exit_loop", {"reason": "reached 3"})])
        if value is not None:
            return Reply(text=str(value + 1))
        return Reply(text="3")

    fleet.stub.add_script(Script(name="counter", match_system="You are counter.", policy=counter))
    fleet.stub.add_script(
        Script(
            name="stepper",
            match_system="You are stepper.",
            policy=lambda r: Reply(text=f"{r.last_user_text()}+"),
        )
    )
    by_tool = await fleet.wait((await fleet.start("until", "0")).id)
    assert (by_tool.status, by_tool.summary) == ("completed", "3")
    assert len(await fleet.children(by_tool.id)) == 3
    capped = await fleet.wait((await fleet.start("capped", "x")).id)
    assert (capped.status, capped.summary) == ("completed", "x+++")
    assert len(await fleet.children(capped.id)) == 3


async def test_parallel_flow_joins_outputs(fleet: Executor) -> None:
    await fleet.define("fanout", flow_type="parallel", sub_agents=["left", "right"])
    await fleet.define("left")
    await fleet.define("right")
    for name in ("left", "right"):
        fleet.stub.add_script(script(name, Reply(text=f"{name} says hi", delay_s=0.3)))
    final = await fleet.wait((await fleet.start("fanout", "topic")).id)
    assert final.status == "completed"
    assert final.summary == "## left\nleft says hi\n\n## right\nright says hi"


async def test_cancel_root_cancels_running_and_queued_descendants(fleet: Executor) -> None:
    await fleet.define("parent", tools=SPAWN)
    await fleet.define("sleeper")
    tasks = [{"agent_name": "sleeper", "prompt": str(i)} for i in range(4)]
    fleet.stub.add_script(script("parent", spawn(*tasks)))
    fleet.stub.add_script(script("sleeper", Reply(hang=True)))
    root = await fleet.start("parent")
    await fleet.wait_until(
        "SELECT count(*) = 4 FROM kb.agent_runs r WHERE parent_run_id = $1 "
        "AND status = 'running' AND EXISTS (SELECT 1 FROM kb.agent_run_messages m "
        "WHERE m.run_id = r.id)",
        root.id,
    )
    await cancel_tree(fleet.queue, fleet.pool, PROJECT, root.id, "user said stop")
    assert (await fleet.wait(root.id)).status == "cancelled"
    for child in await fleet.children(root.id):
        assert (await fleet.wait(child.id)).status == "cancelled"


async def test_recovered_parent_reattaches_to_its_children(
    db_pool: asyncpg.Pool, database_url: str, gemini_stub: GeminiStub
) -> None:
    async with running_executor(db_pool, database_url, gemini_stub, workers=0) as idle:
        await idle.define("parent", tools=SPAWN)
        await idle.define("worker")
        outputs: list[dict[str, Any]] = []

        def parent(request: StubRequest) -> Reply:
            if request.turn == 0:
                return spawn(
                    {"agent_name": "worker", "prompt": "a"}, {"agent_name": "worker", "prompt": "b"}
                )
            outputs.append(spawn_output(request))
            return Reply(text="synthesised")

        gemini_stub.add_script(Script(name="parent", match_system="You are parent.", policy=parent))
        gemini_stub.add_script(
            Script(
                name="worker",
                match_system="You are worker.",
                policy=lambda r: Reply(text=f"did {r.last_user_text()}"),
            )
        )
        root = await idle.start("parent")
        (claimed,) = await idle.queue.claim_next("doomed-worker", 30.0)
        children = ChildRuns(
            pool=db_pool, queue=idle.queue, definitions=idle.definitions, poll_s=0.05
        )
        doomed = AgentLoop(
            pool=db_pool,
            definitions=idle.definitions,
            tools=idle.gateway,
            model=model_client_for(gemini_stub),
            owner="doomed-worker",
            coordinator=Coordinator(pool=db_pool, definitions=idle.definitions, children=children),
        )
        task = asyncio.create_task(doomed.execute(claimed, RunControl()))
        await idle.wait_until(
            "SELECT cardinality(child_run_ids) = 2 FROM kb.agent_run_tool_calls WHERE run_id = $1",
            root.id,
        )
        task.cancel()  # the worker dies mid spawn_agents: no reason recorded, run stays running
        assert await asyncio.gather(task, return_exceptions=True)
        await doomed.model.aclose()  # type: ignore[attr-defined]
        await db_pool.execute(
            "UPDATE kb.agent_runs SET lease_expires_at = now() WHERE id = $1", root.id
        )
        spawned = [c.id for c in await idle.children(root.id)]

    async with running_executor(db_pool, database_url, gemini_stub, workers=1) as fleet:
        final = await fleet.wait(root.id)
        assert final.status == "completed", final.error_message
        assert [c.id for c in await fleet.children(root.id)] == spawned  # never re-spawned
        (output,) = outputs
        assert sorted(r["summary"] for r in output["output"]["results"]) == ["did a", "did b"]
        kinds = [e.type for e in await fleet.events(root.id)]
        assert kinds.count("child_run_started") == 2
        assert kinds.count("child_run_finished") == 2
        (call,) = await fleet.tool_calls(root.id)
        assert call["status"] == "completed"
