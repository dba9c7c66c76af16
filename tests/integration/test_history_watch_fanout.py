"""WatchRun fan-out (issue 11): many watchers of one run share one read per notification,
through real gRPC (the in-process stack, auth on) on real PostgreSQL."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import grpc
import pytest

from agentfleet import events as ev
from agentfleet.runs import run_feed
from agentfleet.runs import run_watch as watch
from agentfleet.runs.run_feed import RunTargets
from agentfleet.testing import factories as f
from agentfleet.testing.services import Stack
from agentfleet.v1 import common_pb2, history_pb2, history_pb2_grpc

P = "fan-a"
OTHER = "fan-b"
STEP = 10.0  # deadline of each wait, seconds
WATCHERS = 20


@pytest.fixture
async def history(stack: Stack) -> history_pb2_grpc.HistoryServiceStub:
    token = await stack.create_token(P, "member")
    return history_pb2_grpc.HistoryServiceStub(stack.channel("history", token=token))


@dataclasses.dataclass
class Statements:
    """The history service's event reads (their ``after_seq``), run-status reads and proto
    conversions, counted while the real functions run."""

    event_reads: list[int] = dataclasses.field(default_factory=list)
    status_reads: int = 0
    conversions: int = 0

    def clear(self) -> None:
        self.event_reads.clear()
        self.status_reads = self.conversions = 0


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> Statements:
    counts = Statements()
    read_events, to_proto, watch_target = ev.read_events, ev.to_proto, RunTargets.get

    def counted_read_events(*args: Any, **kwargs: Any) -> Any:
        counts.event_reads.append(kwargs.get("after_seq", 0))
        return read_events(*args, **kwargs)

    def counted_to_proto(*args: Any, **kwargs: Any) -> Any:
        counts.conversions += 1
        return to_proto(*args, **kwargs)

    def counted_watch_target(*args: Any, **kwargs: Any) -> Any:
        counts.status_reads += 1
        return watch_target(*args, **kwargs)

    monkeypatch.setattr(ev, "read_events", counted_read_events)
    monkeypatch.setattr(ev, "to_proto", counted_to_proto)
    monkeypatch.setattr(RunTargets, "get", counted_watch_target)
    return counts


async def _read(call, n: int) -> list[common_pb2.RunEvent]:  # type: ignore[no-untyped-def]
    return [await asyncio.wait_for(call.read(), STEP) for _ in range(n)]


async def _assert_ends(call) -> None:  # type: ignore[no-untyped-def]
    assert await asyncio.wait_for(call.read(), STEP) is grpc.aio.EOF
    assert await call.code() == grpc.StatusCode.OK


def _watch(history, run: dict[str, Any], **request: Any):  # type: ignore[no-untyped-def]
    return history.WatchRun(
        history_pb2.WatchRunRequest(project_id=P, run_id=str(run["id"]), **request)
    )


async def _replay(db_pool, run: dict[str, Any]) -> list[common_pb2.RunEvent]:  # type: ignore[no-untyped-def]
    stored = await ev.read_events(
        db_pool, project_id=run["project_id"], run_id=str(run["id"]), include_internal=True
    )
    return [ev.to_proto(p, parent_run_id=None, trace_id=run["trace_id"]) for p in stored]


async def test_one_read_and_one_conversion_per_event_for_every_watcher(  # type: ignore[no-untyped-def]
    history, db_pool, statements
) -> None:
    run = await f.insert_run(db_pool, project_id=P, agent_name="popular", status="running")
    await f.append(db_pool, run=run, events=f.start_events(run))
    calls = [_watch(history, run) for _ in range(WATCHERS)]
    received = [await _read(call, 3) for call in calls]
    statements.clear()
    for step in range(1, 11):
        await f.append(
            db_pool, run=run, events=f.step_events(run, step=step, tool_call_id=f"c{step}")
        )
        for mine, call in zip(received, calls, strict=True):
            mine += await _read(call, 3)
    # Ten commits, twenty watchers: one shared read and one conversion per event, not one
    # per watcher (a notification can at most add a read that finds nothing new).
    assert len(statements.event_reads) <= 10 + 2
    assert statements.status_reads <= 2
    assert statements.conversions == 30
    await f.append(db_pool, run=run, events=f.finish_events(run))
    for mine, call in zip(received, calls, strict=True):
        mine += await _read(call, 2)
        await _assert_ends(call)
    replay = await _replay(db_pool, run)
    for mine in received:
        assert mine == replay  # byte-identical to a replay, gapless, in order


async def test_watcher_of_another_project_is_refused_while_the_run_is_watched(  # type: ignore[no-untyped-def]
    stack: Stack, history, db_pool
) -> None:
    run = await f.insert_run(db_pool, project_id=P, agent_name="private", status="running")
    await f.append(db_pool, run=run, events=f.start_events(run))
    mine = _watch(history, run)
    assert len(await _read(mine, 3)) == 3
    other = history_pb2_grpc.HistoryServiceStub(
        stack.channel("history", token=await stack.create_token(OTHER, "member"))
    )
    foreign = other.WatchRun(history_pb2.WatchRunRequest(project_id=OTHER, run_id=str(run["id"])))
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await asyncio.wait_for(foreign.read(), STEP)
    assert failure.value.code() == grpc.StatusCode.NOT_FOUND
    mine.cancel()


async def test_watchers_of_a_run_stopped_without_run_finished_all_end(  # type: ignore[no-untyped-def]
    history, db_pool, statements, monkeypatch
) -> None:
    # No event, hence no notification: the periodic recheck finds the stopped run.
    monkeypatch.setattr(watch, "RECHECK_INTERVAL_S", 0.2)
    run = await f.insert_run(db_pool, project_id=P, agent_name="crashed", status="running")
    await f.append(db_pool, run=run, events=f.start_events(run))
    calls = [_watch(history, run) for _ in range(WATCHERS)]
    for call in calls:
        assert len(await _read(call, 3)) == 3
    await db_pool.execute(
        "UPDATE kb.agent_runs SET status = 'failed', completed_at = now() WHERE id = $1", run["id"]
    )
    for call in calls:
        await _assert_ends(call)
    # A watcher joining the stopped run after its last event ends at once.
    late = _watch(history, run, after_seq=3)
    await _assert_ends(late)


async def test_a_stalled_watcher_neither_blocks_others_nor_loses_events(  # type: ignore[no-untyped-def]
    stack: Stack, history, db_pool, statements, monkeypatch
) -> None:
    monkeypatch.setattr(run_feed, "CAPACITY", 4)
    run = await f.insert_run(db_pool, project_id=P, agent_name="bulky", status="running")
    token = await stack.create_token(P, "member")
    # Its own connection with a small window and no BDP probing: while its client reads
    # nothing, the server's writes to it block after a few large events.
    stalled_channel = grpc.aio.insecure_channel(
        stack.address("history"),
        options=[
            ("grpc.http2.bdp_probe", 0),
            ("grpc.http2.lookahead_bytes", 16 * 1024),
            ("grpc.max_receive_message_length", 16 * 1024 * 1024),
        ],
    )
    try:
        stalled = history_pb2_grpc.HistoryServiceStub(stalled_channel).WatchRun(
            history_pb2.WatchRunRequest(project_id=P, run_id=str(run["id"])),
            metadata=(("authorization", f"Bearer {token}"),),
        )
        prompt = _watch(history, run)
        await f.append(db_pool, run=run, events=f.start_events(run))
        received = await _read(stalled, 3)
        assert len(await _read(prompt, 3)) == 3
        statements.clear()
        bulky = "x" * 256 * 1024
        for step in range(1, 21):
            event = ev.ModelText(agent_name="bulky", text=bulky, step=step)
            await f.append(db_pool, run=run, events=[event])
            assert (await _read(prompt, 1))[0].seq == 3 + step  # not held back
        reads_while_stalled = len(statements.event_reads)
        await f.append(db_pool, run=run, events=f.finish_events(run))
        received += await _read(stalled, 22)
        await _assert_ends(stalled)
        # It fell behind the buffer and caught up with reads of its own from the store.
        assert min(statements.event_reads[reads_while_stalled:]) < 3 + 20 - run_feed.CAPACITY
        assert received == await _replay(db_pool, run)
    finally:
        await stalled_channel.close()


async def test_lost_notifications_cost_one_shared_recheck_not_one_per_watcher(  # type: ignore[no-untyped-def]
    history, db_pool, statements, monkeypatch
) -> None:
    monkeypatch.setattr(watch, "RECHECK_INTERVAL_S", 0.5)
    run = await f.insert_run(db_pool, project_id=P, agent_name="muted", status="running")
    await f.append(db_pool, run=run, events=f.start_events(run))
    calls = [_watch(history, run) for _ in range(WATCHERS)]
    for call in calls:
        assert len(await _read(call, 3)) == 3
    # Every notification is lost from here on: only the periodic recheck finds new events.
    monkeypatch.setattr(ev, "parse_notification", lambda payload: None)
    statements.clear()
    await f.append(db_pool, run=run, events=f.step_events(run, step=1, tool_call_id="m"))
    for call in calls:
        assert [e.seq for e in await _read(call, 3)] == [4, 5, 6]
    # The first watcher to time out reads for all of them (old: one read per watcher).
    assert len(statements.event_reads) <= 3
    for call in calls:
        call.cancel()
