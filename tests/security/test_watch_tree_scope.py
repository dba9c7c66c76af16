"""WatchRun include_descendants across tenants (issue 37, item 6): another project's token
cannot watch a tree (NOT_FOUND, as for one run); a descendant_after_seq naming another
project's run streams nothing of it; a map larger than any tree is refused before any read.
In-process services over real gRPC, the stub Gemini."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import grpc
import pytest

from agentfleet.gemini_stub import Call, GeminiStub, Reply, Script
from agentfleet.testing.services import Stack
from agentfleet.v1 import (
    common_pb2,
    executor_pb2,
    executor_pb2_grpc,
    history_pb2,
    history_pb2_grpc,
    registry_pb2,
    registry_pb2_grpc,
)
from services.history.queries import TREE_LIMIT

OURS, THEIRS = "tree-ours", "tree-theirs"


async def _define(stack: Stack, token: str, project: str, name: str, tools: list[str]) -> None:
    registry = registry_pb2_grpc.AgentRegistryServiceStub(stack.channel("executor", token=token))
    await registry.UpsertAgentDefinition(
        registry_pb2.UpsertAgentDefinitionRequest(
            project_id=project,
            agent_definition=common_pb2.AgentDefinition(
                name=name,
                system_prompt=f"You are {name}.",
                model=common_pb2.ModelConfig(name="gemini-2.5-flash"),
                tools=tools,
                visibility=common_pb2.VISIBILITY_EXTERNAL,
            ),
        )
    )


async def _tree(stack: Stack, token: str, project: str) -> str:
    """A finished boss -> helper tree of ``project``; the boss's id."""
    await _define(stack, token, project, "boss", ["spawn_agents"])
    await _define(stack, token, project, "helper", [])
    executor = executor_pb2_grpc.ExecutorServiceStub(stack.channel("executor", token=token))
    root = ""
    async with asyncio.timeout(30):
        async for event in executor.StartRun(
            executor_pb2.StartRunRequest(project_id=project, agent_name="boss", input="go")
        ):
            root = root or event.run_id
    return root


def _watch(stack: Stack, token: str, project: str, run_id: str, **fields: Any):  # type: ignore[no-untyped-def]
    history = history_pb2_grpc.HistoryServiceStub(stack.channel("history", token=token))
    return history.WatchRun(
        history_pb2.WatchRunRequest(
            project_id=project, run_id=run_id, include_descendants=True, **fields
        )
    )


async def _all(call: Any) -> list[common_pb2.RunEvent]:
    async with asyncio.timeout(30):
        return [e async for e in call]


async def test_a_tree_is_watched_only_in_its_project(
    stub_stack: Stack, gemini_stub: GeminiStub
) -> None:
    gemini_stub.add_script(
        Script(
            name="boss",
            match_system="You are boss.",
            per_conversation=True,
            replies=[
                Reply(
                    calls=[
                        Call("spawn_agents", {"tasks": [{"agent_name": "helper", "prompt": "x"}]})
                    ]
                ),
                Reply(text="boss done"),
            ],
        )
    )
    gemini_stub.add_script(
        Script(name="helper", match_system="You are helper.", replies=[Reply(text="ok")] * 4)
    )
    ours = await stub_stack.create_token(OURS, "admin")
    theirs = await stub_stack.create_token(THEIRS, "admin")
    our_root = await _tree(stub_stack, ours, OURS)
    their_root = await _tree(stub_stack, theirs, THEIRS)
    their_ids = {
        r["id"]
        for r in await stub_stack.pool.fetch(
            "SELECT id::text FROM kb.agent_runs WHERE project_id = $1", THEIRS
        )
    }

    # Their tree, named in our project or with their project and our token: not found.
    for project in (OURS, THEIRS):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await _all(_watch(stub_stack, ours, project, their_root))
        assert caught.value.code() in (
            grpc.StatusCode.NOT_FOUND,
            grpc.StatusCode.PERMISSION_DENIED,
        ), project

    # Their runs named as our descendants: ignored, nothing of theirs is streamed.
    seen = await _all(
        _watch(stub_stack, ours, OURS, our_root, descendant_after_seq=dict.fromkeys(their_ids, 0))
    )
    assert {e.run_id for e in seen}.isdisjoint(their_ids)
    assert len({e.run_id for e in seen}) == 2  # our boss and helper


async def test_a_descendant_map_larger_than_a_tree_is_refused(stub_stack: Stack) -> None:
    token = await stub_stack.create_token(OURS, "admin")
    oversized = {str(uuid.uuid4()): 1 for _ in range(TREE_LIMIT + 1)}
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await _all(
            _watch(stub_stack, token, OURS, str(uuid.uuid4()), descendant_after_seq=oversized)
        )
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "descendant_after_seq" in (caught.value.details() or "")
