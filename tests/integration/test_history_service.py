"""HistoryService through real gRPC (the in-process stack, auth on) on real PostgreSQL."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import grpc
import pytest
from google.protobuf import duration_pb2

from agentfleet import events as ev
from agentfleet.process.service_runtime import start_service
from agentfleet.rpc.clients import open_channel
from agentfleet.runs import run_watch as watch_module
from agentfleet.structs import struct_dict
from agentfleet.testing import factories as f
from agentfleet.testing.services import Stack
from agentfleet.v1 import common_pb2, history_pb2, history_pb2_grpc
from services.history.server import build

P = "hist-a"
OTHER = "hist-b"
STEP = 10.0  # deadline of each wait, seconds


@pytest.fixture
async def history(stack: Stack) -> history_pb2_grpc.HistoryServiceStub:
    token = await stack.create_token(P, "member")
    return history_pb2_grpc.HistoryServiceStub(stack.channel("history", token=token))


async def _code(call: object) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await call  # type: ignore[misc]
    return failure.value.code(), failure.value.details() or ""


async def _all_runs(history, **filters) -> list[history_pb2.RunSummary]:  # type: ignore[no-untyped-def]
    runs, token = [], ""
    while True:
        page = await history.ListRuns(
            history_pb2.ListRunsRequest(project_id=P, page_token=token, **filters)
        )
        runs += page.runs
        token = page.next_page_token
        if not token:
            return runs


async def test_paging_sees_every_run_once_while_runs_are_inserted(history, db_pool) -> None:  # type: ignore[no-untyped-def]
    base = datetime.now(UTC) - timedelta(hours=1)
    same_time = base + timedelta(minutes=1)
    existing = set()
    for i in range(23):
        # Several runs share a created_at: the id breaks the tie, so none is lost.
        created = same_time if i % 3 == 0 else base + timedelta(seconds=i)
        run = await f.insert_run(db_pool, project_id=P, agent_name="pager", created_at=created)
        existing.add(str(run["id"]))
    seen: list[str] = []
    token = ""
    while True:
        page = await history.ListRuns(
            history_pb2.ListRunsRequest(project_id=P, page_size=5, page_token=token)
        )
        assert len(page.runs) <= 5
        seen += [r.id for r in page.runs]
        await f.insert_run(db_pool, project_id=P, agent_name="pager")  # newer than every page
        token = page.next_page_token
        if not token:
            break
    assert len(seen) == len(set(seen))
    assert set(seen) == existing
    times = [(r.create_time.ToDatetime(), r.id) for r in await _all_runs(history)]
    assert times == sorted(times, reverse=True)


async def test_page_tokens_and_sizes(history, db_pool) -> None:  # type: ignore[no-untyped-def]
    await db_pool.execute(
        "INSERT INTO kb.agent_runs (project_id, agent_name, input) "
        "SELECT $1, 'bulk', 'x' FROM generate_series(1, 501)",
        P,
    )
    first = await history.ListRuns(history_pb2.ListRunsRequest(project_id=P, page_size=0))
    assert len(first.runs) == 50
    big = await history.ListRuns(history_pb2.ListRunsRequest(project_id=P, page_size=10_000))
    assert len(big.runs) == 500
    assert big.next_page_token
    other_filters = history_pb2.ListRunsRequest(
        project_id=P, agent_name="bulk", page_token=first.next_page_token
    )
    code, details = await _code(history.ListRuns(other_filters))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "page_token" in details
    code, details = await _code(
        history.ListRuns(history_pb2.ListRunsRequest(project_id=P, page_token="not-a-token!"))
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "page_token" in details
    code, _ = await _code(history.ListRuns(history_pb2.ListRunsRequest(project_id=P, page_size=-1)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT


def _forged(token: str, position: list[object]) -> str:
    """``token`` with its position replaced and its filters kept: tokens are not signed."""
    document = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    document["p"] = position
    return base64.urlsafe_b64encode(json.dumps(document).encode()).decode().rstrip("=")


async def test_a_written_token_of_other_kinds_is_invalid_argument(history, db_pool) -> None:  # type: ignore[no-untyped-def]
    await db_pool.execute(
        "INSERT INTO kb.agent_runs (project_id, agent_name, input) "
        "SELECT $1, 'bulk', 'x' FROM generate_series(1, 3)",
        P,
    )
    issued = (
        await history.ListRuns(history_pb2.ListRunsRequest(project_id=P, page_size=1))
    ).next_page_token
    for position in (["2026-11-27T00:00:00+00:00", "not-a-uuid"], [1, 2], [None, None]):
        request = history_pb2.ListRunsRequest(
            project_id=P, page_size=1, page_token=_forged(issued, position)
        )
        code, details = await _code(history.ListRuns(request))
        assert code == grpc.StatusCode.INVALID_ARGUMENT, (position, code, details)
        assert "page_token" in details


async def test_filters_and_internal_agents(history, db_pool) -> None:  # type: ignore[no-untyped-def]
    await f.insert_agent_definition(db_pool, project_id=P, name="plumber", visibility="internal")
    root = await f.insert_run(db_pool, project_id=P, agent_name="boss", status="running")
    child = await f.insert_run(db_pool, project_id=P, agent_name="plumber", parent=root)
    failed = await f.insert_run(db_pool, project_id=P, agent_name="boss", status="failed")
    await f.insert_run(db_pool, project_id=OTHER, agent_name="boss")
    ids = {r.id for r in await _all_runs(history)}
    assert ids == {str(root["id"]), str(failed["id"])}
    ids = {r.id for r in await _all_runs(history, include_internal_agents=True)}
    assert ids == {str(root["id"]), str(failed["id"]), str(child["id"])}
    failed_only = await _all_runs(history, statuses=[common_pb2.RUN_STATUS_FAILED])
    assert [r.id for r in failed_only] == [str(failed["id"])]
    tree = await _all_runs(history, root_run_id=str(root["id"]), include_internal_agents=True)
    assert {r.id for r in tree} == {str(root["id"]), str(child["id"])}
    kids = await _all_runs(history, parent_run_id=str(root["id"]), include_internal_agents=True)
    assert [r.id for r in kids] == [str(child["id"])]
    top = await _all_runs(history, top_level_only=True, include_internal_agents=True)
    assert str(child["id"]) not in {r.id for r in top}
    code, details = await _code(
        history.ListRuns(history_pb2.ListRunsRequest(project_id=P, parent_run_id="nope"))
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "parent_run_id" in details


async def test_get_run_and_another_projects_run(history, db_pool) -> None:  # type: ignore[no-untyped-def]
    definition = await f.insert_agent_definition(db_pool, project_id=P, name="boss")
    root = await f.insert_run(
        db_pool,
        project_id=P,
        agent_name="boss",
        agent_definition_id=definition["id"],
        input="y" * 300,
        resume_count=2,
    )
    child = await f.insert_run(db_pool, project_id=P, agent_name="helper", parent=root)
    for seq in range(3):
        await f.insert_message(db_pool, run=child, seq=seq)
    await f.insert_tool_call(db_pool, run=child, tool_call_id="c1")
    await f.append(db_pool, run=child, events=f.start_events(child))
    got = await history.GetRun(history_pb2.GetRunRequest(project_id=P, run_id=str(child["id"])))
    assert got.run.id == str(child["id"])
    assert got.parent.id == str(root["id"])
    assert got.parent.input_truncated
    assert len(got.parent.input_preview) == 200
    assert (got.message_count, got.tool_call_count, got.last_event_seq) == (3, 1, 3)
    assert not got.agent.exists
    got = await history.GetRun(history_pb2.GetRunRequest(project_id=P, run_id=str(root["id"])))
    assert [c.id for c in got.children] == [str(child["id"])]
    assert got.run.resume_count == 2
    assert got.agent.exists
    assert got.agent.model_name == "gemini-2.5-flash"
    assert not got.HasField("parent")

    foreign = await f.insert_run(db_pool, project_id=OTHER, agent_name="boss")
    await f.insert_tool_call(db_pool, run=foreign, tool_call_id="c1")
    await f.append(db_pool, run=foreign, events=f.start_events(foreign))
    fid = str(foreign["id"])
    for call in (
        history.GetRun(history_pb2.GetRunRequest(project_id=P, run_id=fid)),
        history.ListRunMessages(history_pb2.ListRunMessagesRequest(project_id=P, run_id=fid)),
        history.ListRunToolCalls(history_pb2.ListRunToolCallsRequest(project_id=P, run_id=fid)),
        history.GetRunToolCall(
            history_pb2.GetRunToolCallRequest(project_id=P, run_id=fid, tool_call_id="c1")
        ),
        history.GetRunTree(history_pb2.GetRunTreeRequest(project_id=P, run_id=fid)),
        _first(history.WatchRun(history_pb2.WatchRunRequest(project_id=P, run_id=fid))),
    ):
        assert (await _code(call))[0] == grpc.StatusCode.NOT_FOUND
    code, details = await _code(history.GetRun(history_pb2.GetRunRequest(project_id=P, run_id="x")))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "run_id" in details


async def _first(call: AsyncIterator[common_pb2.RunEvent]) -> common_pb2.RunEvent:
    return await anext(aiter(call))


async def test_messages_and_tool_calls(history, db_pool) -> None:  # type: ignore[no-untyped-def]
    run = await f.insert_run(db_pool, project_id=P, agent_name="talker")
    await f.insert_message(db_pool, run=run, seq=0, role="user", text="short")
    long = await f.insert_message(db_pool, run=run, seq=1, text="z" * 500, step=1)
    await f.insert_message(
        db_pool, run=run, seq=2, text=None, function_calls=[("search_fts", {"q": 1})], step=1
    )
    await f.insert_message(db_pool, run=run, seq=3, role="tool", is_internal=True, step=1)
    rid = str(run["id"])
    listed = await history.ListRunMessages(
        history_pb2.ListRunMessagesRequest(project_id=P, run_id=rid, page_size=2)
    )
    assert [m.seq for m in listed.messages] == [0, 1]
    assert not listed.messages[0].truncated
    assert listed.messages[1].truncated
    assert listed.messages[1].preview == "z" * 200 + "…[truncated]"
    rest = await history.ListRunMessages(
        history_pb2.ListRunMessagesRequest(
            project_id=P, run_id=rid, page_size=2, page_token=listed.next_page_token
        )
    )
    assert [m.seq for m in rest.messages] == [2]  # the internal one is hidden
    assert rest.messages[0].function_names == ["search_fts"]
    assert not rest.next_page_token
    full = await history.GetRunMessage(
        history_pb2.GetRunMessageRequest(project_id=P, run_id=rid, message_id=str(long["id"]))
    )
    assert full.message.content["parts"][0]["text"] == "z" * 500

    await f.insert_tool_call(
        db_pool, run=run, tool_call_id="c1", input={"query": "x" * 1000}, output={"r": [1, 2]}
    )
    await f.insert_tool_call(
        db_pool, run=run, tool_call_id="c2", tool_name="x__y", source="mcp:x", status="started"
    )
    calls = await history.ListRunToolCalls(
        history_pb2.ListRunToolCallsRequest(project_id=P, run_id=rid)
    )
    assert {c.tool_call_id for c in calls.tool_calls} == {"c1", "c2"}
    mcp = next(c for c in calls.tool_calls if c.tool_call_id == "c2")
    assert mcp.source.kind == common_pb2.TOOL_SOURCE_KIND_MCP
    assert mcp.source.mcp_server == "x"
    assert not mcp.HasField("duration")
    one = await history.GetRunToolCall(
        history_pb2.GetRunToolCallRequest(project_id=P, run_id=rid, tool_call_id="c1")
    )
    assert one.tool_call.input["query"] == "x" * 1000
    assert list(one.tool_call.output["r"]) == [1, 2]


async def _read(call, n: int) -> list[common_pb2.RunEvent]:  # type: ignore[no-untyped-def]
    out = []
    for _ in range(n):
        item = await asyncio.wait_for(call.read(), STEP)
        assert item is not grpc.aio.EOF, f"stream ended after {len(out)} of {n} events"
        out.append(item)
    return out


async def _assert_ends(call) -> None:  # type: ignore[no-untyped-def]
    assert await asyncio.wait_for(call.read(), STEP) is grpc.aio.EOF
    assert await call.code() == grpc.StatusCode.OK


async def test_watch_replays_then_follows_live_and_ends(history, db_pool) -> None:  # type: ignore[no-untyped-def]
    run = await f.insert_run(db_pool, project_id=P, agent_name="live", status="running")
    rid = str(run["id"])
    await f.append(db_pool, run=run, events=f.start_events(run))
    call = history.WatchRun(history_pb2.WatchRunRequest(project_id=P, run_id=rid))
    replayed = await _read(call, 3)
    assert [e.seq for e in replayed] == [1, 2, 3]
    internal = ev.ModelText(agent_name="live", is_internal=True, text="plumbing", step=1)
    live_stored = await f.append(
        db_pool, run=run, events=[internal, *f.step_events(run, step=1, tool_call_id="c1")]
    )
    live = await _read(call, 3)
    assert [e.seq for e in live] == [5, 6, 7]  # seq 4 is internal and hidden
    assert live[1].tool_request.arguments["query"] == "q1"
    assert live[0] == ev.to_proto(live_stored[1], parent_run_id=None, trace_id=run["trace_id"])
    await f.append(db_pool, run=run, events=f.finish_events(run))
    final = await _read(call, 2)
    assert final[-1].type == common_pb2.RUN_EVENT_TYPE_RUN_FINISHED
    await _assert_ends(call)
    # An already finished run: replay (internal included on request), then the end.
    again = history.WatchRun(
        history_pb2.WatchRunRequest(project_id=P, run_id=rid, include_internal=True)
    )
    assert [e.seq for e in await _read(again, 9)] == list(range(1, 10))
    await _assert_ends(again)


async def test_second_replica_and_reconnect_see_every_event_once(stack: Stack, db_pool) -> None:  # type: ignore[no-untyped-def]
    first = stack.services["history"]
    replica = await start_service(
        "history",
        build,
        settings=stack.settings,
        pool=db_pool,
        database_url=first.context.database_url,
        port=0,
    )
    channel = open_channel(f"127.0.0.1:{replica.port}", token=await stack.create_token(P))
    try:
        other = history_pb2_grpc.HistoryServiceStub(channel)
        run = await f.insert_run(db_pool, project_id=P, agent_name="roam", status="running")
        rid = str(run["id"])
        await f.append(db_pool, run=run, events=f.start_events(run))
        call = other.WatchRun(history_pb2.WatchRunRequest(project_id=P, run_id=rid))
        received = await _read(call, 3)
        await f.append(db_pool, run=run, events=f.step_events(run, step=1, tool_call_id="a"))
        received += await _read(call, 2)
        call.cancel()  # the client drops mid-run; one event it never read is in flight
        await f.append(db_pool, run=run, events=f.step_events(run, step=2, tool_call_id="b"))
        await f.append(db_pool, run=run, events=f.finish_events(run))
        resumed = other.WatchRun(
            history_pb2.WatchRunRequest(project_id=P, run_id=rid, after_seq=received[-1].seq)
        )
        received += await _read(resumed, 6)
        await _assert_ends(resumed)
        assert [e.seq for e in received] == list(range(1, 12))
    finally:
        await channel.close()
        await replica.stop(grace_s=1.0)
    stored = await ev.read_events(db_pool, project_id=P, run_id=rid, include_internal=True)
    assert [ev.to_proto(p, parent_run_id=None, trace_id=run["trace_id"]) for p in stored] == (
        received
    )


async def test_run_tree(history, db_pool) -> None:  # type: ignore[no-untyped-def]
    root = await f.insert_run(
        db_pool, project_id=P, agent_name="root", tokens_in=10, tokens_out=1, tokens_total_tree=99
    )
    a = await f.insert_run(db_pool, project_id=P, agent_name="a", parent=root, tokens_in=20)
    b = await f.insert_run(db_pool, project_id=P, agent_name="b", parent=root, status="failed")
    a1 = await f.insert_run(db_pool, project_id=P, agent_name="a1", parent=a, status="paused")
    # The root was started by a graph trigger: the tree says so (and by what).
    origin = {"trigger": "on_document_ingested", "object_type": "Document", "outbox_id": "7"}
    await db_pool.execute(
        "UPDATE kb.agent_runs SET started_by = 'trigger', trigger_origin = $2::jsonb,"
        " chain_depth = 2 WHERE id = $1",
        root["id"],
        origin,
    )
    await db_pool.execute(
        "UPDATE kb.agent_runs SET started_by = 'parent' WHERE id = ANY($1::uuid[])",
        [a["id"], b["id"], a1["id"]],
    )
    tree = await history.GetRunTree(
        history_pb2.GetRunTreeRequest(project_id=P, run_id=str(a1["id"]))
    )
    assert tree.root_run_id == str(root["id"])
    assert tree.tokens_total == 99
    assert [n.run_id for n in tree.nodes] == [str(r["id"]) for r in (root, a, a1, b)]
    by_id = {n.run_id: n for n in tree.nodes}
    assert by_id[str(a["id"])].tokens_in == 20
    assert by_id[str(b["id"])].status == common_pb2.RUN_STATUS_FAILED
    assert by_id[str(b["id"])].summary_preview == "boom"
    assert by_id[str(a1["id"])].depth == 2
    triggered = by_id[str(root["id"])]
    assert (triggered.started_by, triggered.chain_depth) == ("trigger", 2)
    assert struct_dict(triggered.trigger_origin) == origin
    assert by_id[str(a["id"])].started_by == "parent"
    assert not by_id[str(a["id"])].HasField("trigger_origin")


async def test_agent_stats(history, db_pool) -> None:  # type: ignore[no-untyped-def]
    specs = [
        ("completed", 100, 1),
        ("completed", 200, 0),
        ("completed", 300, 2),
        ("failed", 400, 0),
        ("paused", 1000, 1),
        ("running", None, 0),
    ]
    for status, duration, resumes in specs:
        await f.insert_run(
            db_pool,
            project_id=P,
            agent_name="stat",
            status=status,
            duration_ms=duration,
            resume_count=resumes,
            step_count=4,
            tokens_in=10,
            tokens_out=3,
        )
    old = datetime.now(UTC) - timedelta(days=3)
    await f.insert_run(db_pool, project_id=P, agent_name="stat", created_at=old)
    await f.insert_run(db_pool, project_id=P, agent_name="other")
    got = await history.GetAgentStats(history_pb2.GetAgentStatsRequest(project_id=P))
    assert [s.agent_name for s in got.stats] == ["other", "stat"]
    stats = got.stats[1]
    assert (stats.total_runs, stats.completed, stats.failed, stats.paused, stats.running) == (
        6,
        3,
        1,
        1,
        1,
    )
    assert stats.success_rate == pytest.approx(3 / 5)
    # percentile_cont over [100, 200, 300, 400, 1000]: p50 = 300, p95 = 400 + 0.8 * 600.
    assert stats.p50_duration.ToMilliseconds() == 300
    assert stats.p95_duration.ToMilliseconds() == 880
    assert (stats.tokens_in, stats.tokens_out, stats.resumes) == (60, 18, 4)
    assert stats.mean_steps == pytest.approx(4)
    week = await history.GetAgentStats(
        history_pb2.GetAgentStatsRequest(
            project_id=P, agent_name="stat", window=duration_pb2.Duration(seconds=7 * 86400)
        )
    )
    assert [s.total_runs for s in week.stats] == [7]
    code, details = await _code(
        history.GetAgentStats(
            history_pb2.GetAgentStatsRequest(
                project_id=P, window=duration_pb2.Duration(seconds=91 * 86400)
            )
        )
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "window" in details


async def test_watchers_share_one_listening_connection(history, db_pool) -> None:  # type: ignore[no-untyped-def]
    run = await f.insert_run(db_pool, project_id=P, agent_name="many", status="running")
    calls = [
        history.WatchRun(history_pb2.WatchRunRequest(project_id=P, run_id=str(run["id"])))
        for _ in range(10)
    ]
    await f.append(db_pool, run=run, events=f.start_events(run))
    for call in calls:
        assert len(await _read(call, 3)) == 3
    listening = await db_pool.fetchval(
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE datname = current_database() AND query ILIKE $1",
        f"LISTEN%{ev.CHANNEL}%",
    )
    assert listening == 1
    for call in calls:
        call.cancel()


async def test_watchers_re_read_after_the_listener_reconnects(  # type: ignore[no-untyped-def]
    history, db_pool, monkeypatch
) -> None:
    # The periodic re-check is pushed out of reach: the event must come through the new
    # listening connection (its re-read after reconnecting, or a later notification).
    monkeypatch.setattr(watch_module, "RECHECK_INTERVAL_S", 600.0)
    run = await f.insert_run(db_pool, project_id=P, agent_name="flaky", status="running")
    call = history.WatchRun(history_pb2.WatchRunRequest(project_id=P, run_id=str(run["id"])))
    await f.append(db_pool, run=run, events=f.start_events(run))
    assert len(await _read(call, 3)) == 3
    async with db_pool.acquire() as conn, conn.transaction():
        await f.append(conn, run=run, events=f.finish_events(run))
        # The listening backend is gone (waited for) before this commits.
        killed = await conn.fetchval(
            "SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND query ILIKE $1",
            f"LISTEN%{ev.CHANNEL}%",
        )
        assert killed == 1
    assert [e.seq for e in await _read(call, 2)] == [4, 5]
    await _assert_ends(call)


async def test_list_runs_by_labels(history, db_pool) -> None:  # type: ignore[no-untyped-def]
    nightly = await f.insert_run(db_pool, project_id=P, agent_name="labelled")
    both = await f.insert_run(db_pool, project_id=P, agent_name="labelled")
    await f.insert_run(db_pool, project_id=P, agent_name="labelled")  # no labels
    other = await f.insert_run(db_pool, project_id=OTHER, agent_name="labelled")
    for run, labels in (
        (nightly, {"job": "nightly"}),
        (both, {"job": "nightly", "team": "ml"}),
        (other, {"job": "nightly"}),
    ):
        await db_pool.execute(
            "UPDATE kb.agent_runs SET labels = $2::jsonb WHERE id = $1",
            run["id"],
            labels,
        )
    found = await _all_runs(history, labels={"job": "nightly"}, page_size=1)
    assert {r.id for r in found} == {str(nightly["id"]), str(both["id"])}  # never OTHER's
    found = await _all_runs(history, labels={"job": "nightly", "team": "ml"})
    assert [r.id for r in found] == [str(both["id"])]
    assert await _all_runs(history, labels={"job": "weekly"}) == []
    code, details = await _code(
        history.ListRuns(
            history_pb2.ListRunsRequest(project_id=P, labels={f"k{i}": "v" for i in range(11)})
        )
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "labels" in details
    # A page token is bound to its labels: another filter cannot reuse it.
    first = await history.ListRuns(
        history_pb2.ListRunsRequest(project_id=P, labels={"job": "nightly"}, page_size=1)
    )
    code, _ = await _code(
        history.ListRuns(
            history_pb2.ListRunsRequest(
                project_id=P, labels={"job": "other"}, page_token=first.next_page_token
            )
        )
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT
