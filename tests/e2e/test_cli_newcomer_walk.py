"""What a newcomer following the README met with the CLI: approvals without their arguments,
run ids too short to use, a paused run that did not say why, a cancel of an ended run that
read as if it had stopped something, and `dag watch` of a finished graph listing one task."""

from __future__ import annotations

import json
import re
from typing import Any

from agentfleet.gemini_stub import GeminiStub, Reply, Script
from agentfleet.testing.waiting import wait_for_query
from agentfleet.v1 import dispatcher_pb2, dispatcher_pb2_grpc, executor_pb2, executor_pb2_grpc
from services.executor.registry.definitions import AgentDefinition, DefinitionRepository
from tests.e2e.cli_harness import MARKER, Cli, cli, install
from tests.integration.approval_harness import CLERK_PROMPT, HELD_ENTITY, clerk_reply

__all__ = ["cli"]

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


async def _define_clerk(cli: Cli, gemini_stub: GeminiStub, **config: Any) -> None:
    """An agent whose model first calls create_entity with HELD_ENTITY, then answers."""
    gemini_stub.add_script(Script(name="clerk", match_system=CLERK_PROMPT, policy=clerk_reply))
    await DefinitionRepository(cli.stack.pool).upsert(
        cli.environ["AGENTFLEET_PROJECT"],
        AgentDefinition(
            name="clerk", system_prompt=CLERK_PROMPT, tools=["create_entity"], config=config
        ),
    )


async def test_approvals_show_the_arguments_to_approve(cli: Cli, gemini_stub: GeminiStub) -> None:
    """They read `input` from ListRunToolCalls, which has only its size: `arguments {}`."""
    await _define_clerk(cli, gemini_stub, approvals={"rules": [{"tools": ["create_entity"]}]})
    executor = executor_pb2_grpc.ExecutorServiceStub(
        cli.stack.channel("executor", token=cli.environ["AGENTFLEET_TOKEN"])
    )
    run = await executor.TriggerRun(
        executor_pb2.StartRunRequest(
            project_id=cli.environ["AGENTFLEET_PROJECT"], agent_name="clerk", input="note it"
        )
    )
    await wait_for_query(
        cli.stack.pool, "SELECT status = 'waiting' FROM kb.agent_runs WHERE id = $1", run.id
    )

    (waiting,) = await cli.json_lines("approvals")
    assert (waiting["run_id"], waiting["tool_name"]) == (run.id, "create_entity")
    assert waiting["input"] == HELD_ENTITY
    code, out, err = await cli("approvals")
    assert (code, err) == (0, "")
    assert f"run {run.id}  call {waiting['tool_call_id']}  create_entity" in out
    assert '  arguments {"key": "from-model", "type": "Note"}' in out.splitlines()


async def test_a_run_prints_whole_ids_and_a_paused_run_says_why_and_how_to_resume(
    cli: Cli, gemini_stub: GeminiStub
) -> None:
    """The tree showed `c7d0600b`, which `show` refused as not a UUID."""
    await _define_clerk(cli, gemini_stub)
    code, out, err = await cli("run", "clerk", "note it", "--max-steps", "1")
    assert (code, err) == (0, ""), out
    # The tree's root line (the in-process services log to the same stdout): its id whole,
    # and why it paused.
    root = re.search(rf"^clerk  ({UUID.pattern})  paused \(step_limit: summary given\)", out, re.M)
    assert root is not None, out
    run_id = root.group(1)
    assert (
        f"clerk {run_id} paused: step_limit: summary given; "
        f"continue it with `agentfleet resume {run_id}`"
    ) in out.splitlines()
    code, out, err = await cli("show", run_id)
    assert (code, err) == (0, "")
    assert "paused" in out


async def test_cancelling_an_ended_run_says_nothing_was_cancelled(
    cli: Cli, gemini_stub: GeminiStub, tmp_path: Any
) -> None:
    await install(cli, tmp_path)
    gemini_stub.add_script(Script(name="helper", match_system=MARKER, replies=[Reply(text="42")]))
    events = await cli.json_lines("run", "helper", "what is the answer?")
    run_id = events[-1]["run_finished"]["run"]["id"]
    code, out, err = await cli("cancel", run_id)
    assert (code, err) == (0, "")
    assert f"run {run_id} had already ended (completed); nothing was cancelled" in out.splitlines()


async def test_watching_a_finished_graph_lists_all_its_tasks(cli: Cli, tmp_path: Any) -> None:
    """The watch stopped at the first snapshot event, whose graph status was already final."""
    dag = tmp_path / "dag.yaml"
    dag.write_text(
        "title: two steps\ntasks:\n  - key: first-task\n    title: first\n"
        "  - key: second-task\n    title: second\n    blocked_by: [first-task]\n"
    )
    (submitted,) = await cli.json_lines("dag", "submit", str(dag))
    graph_id = submitted["task_graph"]["id"]
    dispatcher = dispatcher_pb2_grpc.DispatcherServiceStub(
        cli.stack.channel("dispatcher", token=cli.environ["AGENTFLEET_TOKEN"])
    )
    await dispatcher.CancelTaskGraph(
        dispatcher_pb2.CancelTaskGraphRequest(
            project_id=cli.environ["AGENTFLEET_PROJECT"], task_graph_id=graph_id
        )
    )

    code, out, _ = await cli("dag", "watch", graph_id)
    assert code == 1  # a graph that did not complete
    # Each task's row (the first one may have failed, with no agent to run it, before the
    # cancel reached it: the statuses are not the point, the rows are).
    rows = [line for line in out.splitlines() if "-task" in line]
    assert [row.split()[1] for row in rows] == ["first-task", "second-task"], out
    code, out, _ = await cli("dag", "watch", graph_id, "--json")
    snapshot = [
        e for e in map(json.loads, out.splitlines()) if e["type"] == "TASK_EVENT_TYPE_SNAPSHOT"
    ]
    assert sorted(e["task"]["spec"]["key"] for e in snapshot) == ["first-task", "second-task"]
