"""``agentfleet run`` on an agent that spawns: the live tree follows every descendant through
one WatchRun include_descendants stream, so ``--json`` prints each run's events once, in
each run's seq order, grandchildren included."""

from __future__ import annotations

from collections import defaultdict

from agentfleet.gemini_stub import Call, GeminiStub, Reply, Script
from agentfleet.v1 import common_pb2, registry_pb2, registry_pb2_grpc
from tests.e2e.cli_harness import Cli, cli

__all__ = ["cli"]


async def _define(cli: Cli, name: str, tools: list[str]) -> None:
    registry = registry_pb2_grpc.AgentRegistryServiceStub(
        cli.stack.channel("executor", token=cli.environ["AGENTFLEET_TOKEN"])
    )
    await registry.UpsertAgentDefinition(
        registry_pb2.UpsertAgentDefinitionRequest(
            project_id=cli.environ["AGENTFLEET_PROJECT"],
            agent_definition=common_pb2.AgentDefinition(
                name=name,
                system_prompt=f"You are {name}.",
                model=common_pb2.ModelConfig(name="gemini-2.5-flash"),
                tools=tools,
                visibility=common_pb2.VISIBILITY_EXTERNAL,
            ),
        )
    )


def _spawning(name: str, child: str, count: int) -> Script:
    tasks = [{"agent_name": child, "prompt": f"{child} {i}"} for i in range(count)]
    return Script(
        name=name,
        match_system=f"You are {name}.",
        per_conversation=True,
        replies=[Reply(calls=[Call("spawn_agents", {"tasks": tasks})]), Reply(text=f"{name} done")],
    )


async def test_run_prints_the_whole_trees_events_once(cli: Cli, gemini_stub: GeminiStub) -> None:
    gemini_stub.add_script(_spawning("boss", "mid", 2))
    gemini_stub.add_script(_spawning("mid", "leaf", 1))
    gemini_stub.add_script(
        Script(
            name="leaf",
            match_system="You are leaf.",
            per_conversation=True,
            replies=[Reply(text="leaf done")],
        )
    )
    await _define(cli, "boss", ["spawn_agents"])
    await _define(cli, "mid", ["spawn_agents"])
    await _define(cli, "leaf", [])

    lines = await cli.json_lines("run", "boss", "go")

    seqs: dict[str, list[int]] = defaultdict(list)
    for event in lines:
        if event.get("seq"):
            seqs[event["run_id"]].append(int(event["seq"]))
    assert len(seqs) == 5  # boss, two mids, two leaves
    for run_id, series in seqs.items():
        assert series == list(range(1, len(series) + 1)), run_id
    agents = {e["agent_name"] for e in lines if e.get("type") == "RUN_EVENT_TYPE_RUN_FINISHED"}
    assert {"mid", "leaf"} <= agents
