"""WatchRun with include_descendants on real processes (issue 37, item 6): one stream holds
the events of a run and of every descendant (children and grandchildren, running on two
executors), each run's series gapless and identical to its own WatchRun; a client that hangs
up mid-tree resumes with after_seq and descendant_after_seq, missing nothing and seeing
nothing twice; the stream ends once the whole tree has stopped."""

from __future__ import annotations

import asyncio
import uuid
from collections import defaultdict
from collections.abc import AsyncIterable

import grpc
import pytest

from agentfleet.gemini_stub import Call, Reply, Script
from agentfleet.testing.streams import stored_events_of
from agentfleet.v1 import common_pb2, executor_pb2, history_pb2
from tests.e2e.conftest import Fleet, Project

T = common_pb2.RunEventType
STEPS = 3


def _scripts(fleet: Fleet, marker: str) -> None:
    """boss spawns two mids; each mid spawns a leaf; each leaf takes STEPS slow steps."""
    mids = [{"agent_name": "mid", "prompt": f"mid {i}"} for i in range(2)]
    fleet.stub.add_script(
        Script(
            name=f"boss-{marker}",
            match_system=f"boss {marker}",
            per_conversation=True,
            replies=[Reply(calls=[Call("spawn_agents", {"tasks": mids})]), Reply(text="boss done")],
        )
    )
    leaf = [{"agent_name": "leaf", "prompt": "leaf"}]
    fleet.stub.add_script(
        Script(
            name=f"mid-{marker}",
            match_system=f"mid {marker}",
            per_conversation=True,
            replies=[Reply(calls=[Call("spawn_agents", {"tasks": leaf})]), Reply(text="mid done")],
        )
    )
    steps = [
        Reply(
            text=f"Step {n}.",
            calls=[Call("create_entity", {"type": "Note", "key": f"n{n}-{uuid.uuid4().hex}"})],
            delay_s=0.2,
        )
        for n in range(STEPS)
    ]
    fleet.stub.add_script(
        Script(
            name=f"leaf-{marker}",
            match_system=f"leaf {marker}",
            per_conversation=True,
            replies=[*steps, Reply(text="leaf done", delay_s=0.2)],
        )
    )


async def _tree_project(fleet: Fleet, prefix: str) -> tuple[Project, str]:
    project = await fleet.project(prefix)
    marker = uuid.uuid4().hex[:8]
    await project.define("boss", system_prompt=f"boss {marker}", tools=["spawn_agents"])
    await project.define("mid", system_prompt=f"mid {marker}", tools=["spawn_agents"])
    await project.define("leaf", system_prompt=f"leaf {marker}", tools=["create_entity"])
    _scripts(fleet, marker)
    return project, marker


def _watch(project: Project, run_id: str, history: str = "history-a", **fields):  # type: ignore[no-untyped-def]
    return project.history(history).WatchRun(
        history_pb2.WatchRunRequest(project_id=project.project_id, run_id=run_id, **fields)
    )


async def _collect(stream: AsyncIterable[common_pb2.RunEvent]) -> list[common_pb2.RunEvent]:
    async with asyncio.timeout(60):
        return [event async for event in stream]


def _by_run(stream: list[common_pb2.RunEvent]) -> dict[str, list[bytes]]:
    runs: dict[str, list[bytes]] = defaultdict(list)
    for event in stored_events_of(stream):
        runs[event.run_id].append(event.SerializeToString(deterministic=True))
    return dict(runs)


async def _each_run_alone(project: Project, run_ids: list[str]) -> dict[str, list[bytes]]:
    """Every run's own WatchRun replay, as wire bytes."""
    return {
        run_id: [
            e.SerializeToString(deterministic=True)
            for e in stored_events_of(await _collect(_watch(project, run_id)))
        ]
        for run_id in run_ids
    }


async def _tree_ids(fleet: Fleet, root: str) -> list[str]:
    rows = await fleet.pool.fetch(
        "SELECT id::text FROM kb.agent_runs WHERE root_run_id = $1::uuid", root
    )
    return [r["id"] for r in rows]


async def test_one_stream_holds_the_whole_trees_events(fleet: Fleet) -> None:
    project, _ = await _tree_project(fleet, "watch-tree")
    root = await project.executor("executor-a").TriggerRun(
        executor_pb2.StartRunRequest(project_id=project.project_id, agent_name="boss", input="go")
    )

    stream = await _collect(_watch(project, root.id, "history-b", include_descendants=True))

    ids = await _tree_ids(fleet, root.id)
    assert len(ids) == 5  # boss, two mids, two leaves
    statuses = await fleet.pool.fetch(
        "SELECT status FROM kb.agent_runs WHERE root_run_id = $1::uuid", root.id
    )
    assert {r["status"] for r in statuses} == {"completed"}, "the stream ended before the tree"
    by_run = _by_run(stream)
    assert set(by_run) == set(ids)
    # Each run's series is its own WatchRun's, byte for byte: gapless, in order, whole.
    assert by_run == await _each_run_alone(project, ids)
    for run_id in ids:
        seqs = [e.seq for e in stored_events_of(stream) if e.run_id == run_id]
        assert seqs == list(range(1, len(seqs) + 1))
    # Interleaved as persisted: every tool answer of the tree comes before the boss ends.
    boss_finished = next(
        i for i, e in enumerate(stream) if e.run_id == root.id and e.HasField("run_finished")
    )
    tool_responses = [i for i, e in enumerate(stream) if e.HasField("tool_response")]
    assert (
        len(tool_responses) == 2 * STEPS + 3
    )  # the leaves' calls, the mids' and the boss's spawns
    assert max(tool_responses) < boss_finished


async def test_a_client_resumes_the_tree_with_descendant_after_seq(fleet: Fleet) -> None:
    project, _ = await _tree_project(fleet, "watch-tree-resume")
    root = await project.executor("executor-b").TriggerRun(
        executor_pb2.StartRunRequest(project_id=project.project_id, agent_name="boss", input="go")
    )

    # Hang up once a leaf has answered its first call, mid-tree.
    before: list[common_pb2.RunEvent] = []
    call = _watch(project, root.id, "history-b", include_descendants=True)
    async with asyncio.timeout(60):
        async for event in call:
            before.append(event)
            if event.HasField("tool_response") and event.tool_response.tool_name == "create_entity":
                break
    call.cancel()
    seen = stored_events_of(before)
    last: dict[str, int] = {}
    for event in seen:
        last[event.run_id] = event.seq
    running = await fleet.pool.fetchval(
        "SELECT count(*) FROM kb.agent_runs WHERE root_run_id = $1::uuid AND status = 'running'",
        root.id,
    )
    assert running, "the tree ended before the client hung up"

    after = await _collect(
        _watch(
            project,
            root.id,
            "history-a",
            include_descendants=True,
            after_seq=last.pop(root.id),
            descendant_after_seq=last,
        )
    )

    ids = await _tree_ids(fleet, root.id)
    joined = _by_run(before + after)
    assert joined == await _each_run_alone(project, ids)


async def test_descendant_after_seq_is_checked(fleet: Fleet) -> None:
    project = await fleet.project("watch-tree-bad")
    run_id = str(uuid.uuid4())
    cases = [
        ({"descendant_after_seq": {run_id: 1}}, "needs include_descendants"),
        ({"include_descendants": True, "descendant_after_seq": {"nope": 1}}, "is not a UUID"),
        ({"include_descendants": True, "descendant_after_seq": {run_id: -1}}, "must be 0 to"),
    ]
    for fields, message in cases:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await _collect(_watch(project, run_id, **fields))
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, fields
        assert "descendant_after_seq" in (caught.value.details() or "")
        assert message in (caught.value.details() or "")
    # A run of no tree in this project is NOT_FOUND, as for a single run.
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await _collect(_watch(project, run_id, include_descendants=True))
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
