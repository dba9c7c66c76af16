"""What the dispatcher shows of its work, on the in-process stack: WatchTaskGraph's events
(snapshot, each status change with its session, additions, the graph's end), ListTaskGraphs
paging with tokens bound to their filters, and the dispatch span whose trace is the run's."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import grpc
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentfleet.gemini_stub import GeminiStub, Reply, Script
from agentfleet.testing.services import Stack
from agentfleet.v1 import dispatcher_pb2 as pb
from tests.integration.test_dispatcher_control import define, edge, rpc_error, tasks
from tests.integration.test_dispatcher_service import PROJECT, client, wait_graph


async def test_watch_streams_snapshot_changes_additions_and_ends_with_the_graph(
    stub_stack: Stack, db_pool: asyncpg.Pool, gemini_stub: GeminiStub
) -> None:
    await define(db_pool, "worker")
    gemini_stub.add_script(Script(name="w", policy=lambda r: Reply(text="ok", delay_s=0.3)))
    api = await client(stub_stack)
    created = await api.CreateTaskGraph(
        pb.CreateTaskGraphRequest(
            project_id=PROJECT, tasks=tasks("a", "b", agent="worker"), edges=[edge("a", "b")]
        )
    )
    graph_id = created.task_graph.id
    keys = {t.id: t.spec.key for t in created.task_graph.tasks}
    received: list[pb.TaskEvent] = []
    added = False
    async with asyncio.timeout(20):
        async for event in api.WatchTaskGraph(
            pb.WatchTaskGraphRequest(project_id=PROJECT, task_graph_id=graph_id)
        ):
            received.append(event)
            assert event.task_graph_id == graph_id
            if (
                not added
                and event.type == pb.TASK_EVENT_TYPE_TASK_STATUS_CHANGED
                and keys[event.task.id] == "a"
            ):
                added = True  # grow the graph while it runs: c waits for b
                reply = await api.AddTasks(
                    pb.AddTasksRequest(
                        project_id=PROJECT,
                        task_graph_id=graph_id,
                        tasks=tasks("c", agent="worker"),
                        edges=[edge("b", "c")],
                    )
                )
                keys[reply.tasks[0].id] = "c"

    snapshot = received[:2]
    assert [e.type for e in snapshot] == [pb.TASK_EVENT_TYPE_SNAPSHOT] * 2
    assert {keys[e.task.id] for e in snapshot} == {"a", "b"}
    assert all(e.previous_status == pb.TASK_STATUS_UNSPECIFIED for e in snapshot)
    status = {keys[e.task.id]: e.task.status for e in snapshot}
    assert status["b"] == pb.TASK_STATUS_PENDING

    changes: dict[str, list[tuple[int, int]]] = {"a": [], "b": [], "c": []}
    order: list[tuple[str, int]] = []
    for event in received[2:-1]:
        key = keys[event.task.id]
        if event.type == pb.TASK_EVENT_TYPE_TASK_ADDED:
            assert key == "c"
            assert event.task.status == pb.TASK_STATUS_PENDING
            assert list(event.task.blocker_keys) == ["b"]
            status[key] = event.task.status
            continue
        assert event.type == pb.TASK_EVENT_TYPE_TASK_STATUS_CHANGED, event
        assert event.previous_status == status[key], (key, event)
        status[key] = event.task.status
        changes[key].append((event.previous_status, event.task.status))
        order.append((key, event.task.status))
        if event.task.status == pb.TASK_STATUS_COMPLETED:
            assert event.session.outcome == pb.SESSION_OUTCOME_COMPLETED
            assert event.session.run_id == event.task.last_run_id != ""
            assert event.session.task_id == event.task.id
    running, done = pb.TASK_STATUS_IN_PROGRESS, pb.TASK_STATUS_COMPLETED
    for key in ("b", "c"):
        assert changes[key] == [(pb.TASK_STATUS_PENDING, running), (running, done)], key
    assert status == {"a": done, "b": done, "c": done}
    assert order.index(("a", done)) < order.index(("b", running))
    assert order.index(("b", done)) < order.index(("c", running))

    last = received[-1]
    assert last.type == pb.TASK_EVENT_TYPE_GRAPH_STATUS_CHANGED
    assert not last.HasField("task")
    assert last.graph_status == pb.TASK_GRAPH_STATUS_COMPLETED
    assert (last.counts.total, last.counts.completed) == (3, 3)

    # A finished graph: the snapshot, then the stream ends.
    again = [
        e
        async for e in api.WatchTaskGraph(
            pb.WatchTaskGraphRequest(project_id=PROJECT, task_graph_id=graph_id), timeout=5
        )
    ]
    assert [e.type for e in again] == [pb.TASK_EVENT_TYPE_SNAPSHOT] * 3
    assert all(e.graph_status == pb.TASK_GRAPH_STATUS_COMPLETED for e in again)
    missing = api.WatchTaskGraph(
        pb.WatchTaskGraphRequest(
            project_id=PROJECT, task_graph_id="6d1f0d8e-0000-4000-8000-000000000000"
        )
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await missing.read()
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


async def list_all(api: Any, page_size: int, statuses: list[int]) -> list[list[str]]:
    pages, token = [], ""
    while True:
        reply = await api.ListTaskGraphs(
            pb.ListTaskGraphsRequest(
                project_id=PROJECT, page_size=page_size, page_token=token, statuses=statuses
            )
        )
        pages.append([g.id for g in reply.task_graphs])
        assert all(not g.tasks for g in reply.task_graphs)
        token = reply.next_page_token
        if not token:
            return pages


async def test_list_task_graphs_pages_newest_first_with_tokens_bound_to_filters(
    stub_stack: Stack, db_pool: asyncpg.Pool
) -> None:
    api = await client(stub_stack)
    ids = []
    for i in range(5):
        # No agent can run these (no agent defined, no default): each graph ends FAILED.
        created = await api.CreateTaskGraph(
            pb.CreateTaskGraphRequest(project_id=PROJECT, title=f"g{i}", tasks=tasks("only"))
        )
        ids.append(created.task_graph.id)
    for graph_id in ids:
        assert (await wait_graph(api, graph_id)).status == pb.TASK_GRAPH_STATUS_FAILED
    for graph_id in ids[1::2]:
        await api.CancelTaskGraph(
            pb.CancelTaskGraphRequest(project_id=PROJECT, task_graph_id=graph_id)
        )
    newest_first = ids[::-1]
    cancelled, failed = pb.TASK_GRAPH_STATUS_CANCELLED, pb.TASK_GRAPH_STATUS_FAILED

    assert await list_all(api, 2, []) == [newest_first[:2], newest_first[2:4], newest_first[4:]]
    assert await list_all(api, 1, [cancelled]) == [[ids[3]], [ids[1]]]
    assert await list_all(api, 0, [failed]) == [[ids[4], ids[2], ids[0]]]
    assert await list_all(api, 10_000, [failed, cancelled]) == [newest_first]
    # UNSPECIFIED in a filter matches nothing (proto contract).
    assert await list_all(api, 0, [pb.TASK_GRAPH_STATUS_UNSPECIFIED]) == [[]]

    first = await api.ListTaskGraphs(pb.ListTaskGraphsRequest(project_id=PROJECT, page_size=2))
    for request, field in (
        (
            pb.ListTaskGraphsRequest(
                project_id=PROJECT, page_token=first.next_page_token, statuses=[failed]
            ),
            "page_token",
        ),
        (pb.ListTaskGraphsRequest(project_id=PROJECT, page_token="garbage"), "page_token"),
        (pb.ListTaskGraphsRequest(project_id=PROJECT, page_size=-1), "page_size"),
        (pb.ListTaskGraphsRequest(project_id=PROJECT, statuses=[99]), "statuses[0]"),
    ):
        error = await rpc_error(api.ListTaskGraphs(request))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert field in error.details()
    # The same token with the same filters goes on where it stopped.
    second = await api.ListTaskGraphs(
        pb.ListTaskGraphsRequest(project_id=PROJECT, page_size=2, page_token=first.next_page_token)
    )
    assert [g.id for g in second.task_graphs] == newest_first[2:4]


async def test_dispatch_span_shares_its_trace_with_the_run(
    spans: InMemorySpanExporter,
    stub_stack: Stack,
    db_pool: asyncpg.Pool,
    gemini_stub: GeminiStub,
) -> None:
    await define(db_pool, "worker")
    gemini_stub.add_script(Script(name="w", policy=lambda r: Reply(text="ok")))
    api = await client(stub_stack)
    created = await api.CreateTaskGraph(
        pb.CreateTaskGraphRequest(project_id=PROJECT, tasks=tasks("a", "b", agent="worker"))
    )
    graph = await wait_graph(api, created.task_graph.id)
    assert graph.status == pb.TASK_GRAPH_STATUS_COMPLETED
    dispatch = {
        s.attributes["agentfleet.task_id"]: s
        for s in spans.get_finished_spans()
        if s.name == "dispatch"
    }
    assert set(dispatch) == {t.id for t in graph.tasks}
    trace_ids = set()
    for task in graph.tasks:
        span = dispatch[task.id]
        assert span.attributes["agentfleet.run_id"] == task.last_run_id
        assert span.attributes["agentfleet.agent_name"] == "worker"
        row = await db_pool.fetchrow(
            "SELECT r.trace_id, s.properties ->> 'trace_id' AS session_trace "
            "FROM kb.agent_runs r JOIN kb.graph_objects s ON s.properties ->> 'run_id' = "
            "r.id::text WHERE r.id = $1::uuid AND s.type = 'Session'",
            task.last_run_id,
        )
        expected = format(span.context.trace_id, "032x")
        assert row["trace_id"] == expected
        assert row["session_trace"] == expected
        trace_ids.add(expected)
    assert len(trace_ids) == 2  # one trace per dispatch, not one shared by the loop
