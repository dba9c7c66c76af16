"""History as real processes (issue 7, "What it must show", first two points): WatchRun
replays exactly what StartRun streamed live, and a client of a second history process that
disconnects mid-run and reconnects with its last seq misses nothing and sees nothing twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable

from agentfleet.gemini_stub import Call, Reply, Script
from agentfleet.testing.streams import stored_events_of
from agentfleet.v1 import common_pb2, executor_pb2, history_pb2
from tests.e2e.conftest import Fleet, Project

T = common_pb2.RunEventType


def wire(stream: list[common_pb2.RunEvent]) -> list[bytes]:
    """Events as bytes, so equality means the same message on the wire."""
    return [event.SerializeToString(deterministic=True) for event in stream]


async def collect(stream: AsyncIterable[common_pb2.RunEvent], timeout_s: float = 20.0) -> list:
    async with asyncio.timeout(timeout_s):
        return [event async for event in stream]


def watch(project: Project, history: str, run_id: str, after_seq: int = 0):  # type: ignore[no-untyped-def]
    return project.history(history).WatchRun(
        history_pb2.WatchRunRequest(
            project_id=project.project_id, run_id=run_id, after_seq=after_seq
        )
    )


def stepping_script(marker: str, *, steps: int, delay_s: float) -> Script:
    """``steps`` replies that each create an entity, then an answer; every reply delayed."""
    replies = [
        Reply(
            text=f"Step {n}.",
            calls=[Call("create_entity", {"type": "Note", "key": f"n{n}"})],
            delay_s=delay_s,
        )
        for n in range(1, steps + 1)
    ]
    return Script(
        name=marker,
        match_system=marker,
        per_conversation=True,
        replies=[*replies, Reply(text="All steps done.", delay_s=delay_s)],
    )


async def test_start_run_live_stream_equals_watch_run_replay(fleet: Fleet) -> None:
    project = await fleet.project("replay")
    marker = f"[{project.project_id}]"
    await project.define("stepper", system_prompt=f"You step. {marker}", tools=["create_entity"])
    fleet.stub.add_script(stepping_script(marker, steps=2, delay_s=0.05))

    live = stored_events_of(
        await collect(
            project.executor("executor-b").StartRun(
                executor_pb2.StartRunRequest(
                    project_id=project.project_id, agent_name="stepper", input="go"
                )
            )
        )
    )
    assert live[-1].type == T.RUN_EVENT_TYPE_RUN_FINISHED
    assert live[-1].run_finished.run.status == common_pb2.RUN_STATUS_COMPLETED
    assert [e.type for e in live].count(T.RUN_EVENT_TYPE_TOOL_RESPONSE) == 2
    run_id = live[0].run_id

    for history in ("history-a", "history-b"):
        replayed = await collect(watch(project, history, run_id))
        assert wire(replayed) == wire(live), history
    # A replay from the middle is the tail of the same stream.
    middle = live[len(live) // 2].seq
    tail = await collect(watch(project, "history-a", run_id, after_seq=middle))
    assert wire(tail) == wire([e for e in live if e.seq > middle])


async def test_watcher_on_a_second_history_reconnects_without_gap_or_duplicate(
    fleet: Fleet,
) -> None:
    project = await fleet.project("reconnect")
    marker = f"[{project.project_id}]"
    await project.define("stepper", system_prompt=f"You step. {marker}", tools=["create_entity"])
    fleet.stub.add_script(stepping_script(marker, steps=4, delay_s=0.25))
    run = await project.executor("executor-a").TriggerRun(
        executor_pb2.StartRunRequest(
            project_id=project.project_id, agent_name="stepper", input="go"
        )
    )

    # First connection: follow until the first tool answer, then hang up.
    before: list[common_pb2.RunEvent] = []
    call = watch(project, "history-b", run.id)
    async with asyncio.timeout(20):
        async for event in call:
            before.append(event)
            if event.type == T.RUN_EVENT_TYPE_TOOL_RESPONSE:
                break
    call.cancel()
    status = await fleet.pool.fetchval("SELECT status FROM kb.agent_runs WHERE id = $1", run.id)
    assert status == "running", "the run ended before the watcher disconnected"

    # Second connection, from the last seq seen: everything after it, once, to the end.
    after = await collect(watch(project, "history-b", run.id, after_seq=before[-1].seq))
    assert after, "nothing after the reconnect"
    assert after[-1].type == T.RUN_EVENT_TYPE_RUN_FINISHED
    assert after[-1].run_finished.run.status == common_pb2.RUN_STATUS_COMPLETED
    assert [e.type for e in after].count(T.RUN_EVENT_TYPE_RUN_FINISHED) == 1
    joined = before + after
    assert [e.seq for e in joined] == list(range(1, len(joined) + 1))
    assert wire(joined) == wire(await collect(watch(project, "history-a", run.id)))
