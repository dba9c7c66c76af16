"""A member's WatchTaskGraph streams cannot stall the shared dispatcher.

Every stream used to re-read its whole graph (every task and edge, JSON decoded and sorted)
once a second and on every notification: 64 streams (the per-token cap) of a 10,000-task
graph held the dispatcher's event loop up to 2.3 s and another project's 3-task
GetTaskGraph took 23-26 s instead of 40 ms; the claim loop shares that loop and pool. Now the
streams of one graph in a process share one feed (``services.dispatcher.graphs.graph_feed``): a
change is read once for all of them, and the periodic recheck reads one aggregate row (the
graph's stamp), reading the graph again only when the stamp changed.

The stack is in-process, so the full reads of the graph are counted where they are made.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import pytest

from agentfleet.testing.services import start_stack
from agentfleet.v1 import dispatcher_pb2 as pb
from agentfleet.v1 import dispatcher_pb2_grpc
from services.dispatcher.graphs import graph_reads
from services.dispatcher.graphs.dag import NewTask
from services.dispatcher.graphs.graph_writes import GraphStore

PROJECT = "watched"
TASKS = 300
STREAMS = 16


async def stalled_graph(pool: asyncpg.Pool, n: int) -> str:
    """A graph whose root is in progress under a lease nobody renews nor takes over for a
    day, the rest waiting on it: ACTIVE with nothing to dispatch, as during a long task."""
    tasks = [NewTask(key="root", title="root")] + [
        NewTask(key=f"t{i}", title=f"t{i}", description="x" * 1000) for i in range(n)
    ]
    graph_id = await GraphStore(pool).create_graph(
        PROJECT,
        title="g",
        tasks=tasks,
        edges=[("root", f"t{i}") for i in range(n)],
        max_parallel=0,
        labels={},
        request_id="",
        validate_only=False,
    )
    await pool.execute(
        """UPDATE kb.graph_objects SET properties = properties || jsonb_build_object(
               'status', 'in_progress', 'ready', false, 'lease_owner', 'elsewhere',
               'lease_expires', extract(epoch FROM now()) + 86400)
           WHERE project_id = $1 AND type = 'SpecTask' AND properties ->> 'key' = 'root'""",
        PROJECT,
    )
    return graph_id


class Calls:
    """Calls of one of ``graph_reads``' statements for one graph, as they are made."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, name: str, graph_id: str) -> None:
        self.n = 0
        self._made = asyncio.Event()
        real: Callable[..., Awaitable[Any]] = getattr(graph_reads, name)

        async def counting(*args: Any, **kwargs: Any) -> Any:
            if args[2] == graph_id:  # (connection, project, graph)
                self.n += 1
                self._made.set()
            return await real(*args, **kwargs)

        monkeypatch.setattr(graph_reads, name, counting)

    async def reach(self, n: int) -> None:
        while self.n < n:
            self._made.clear()
            await self._made.wait()


async def test_watchers_of_a_graph_share_its_reads(
    database_url: str, db_pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    graph_id = await stalled_graph(db_pool, TASKS)
    full_reads = Calls(monkeypatch, "graph_tasks", graph_id)
    stack = await start_stack(database_url=database_url, pool=db_pool, names=("dispatcher",))
    try:
        token = await stack.create_token(PROJECT, "member")
        api = dispatcher_pb2_grpc.DispatcherServiceStub(stack.channel("dispatcher", token=token))
        request = pb.WatchTaskGraphRequest(project_id=PROJECT, task_graph_id=graph_id)
        streams = [api.WatchTaskGraph(request) for _ in range(STREAMS)]
        async with asyncio.timeout(60):
            for stream in streams:
                for _ in range(TASKS + 1):
                    assert (await stream.read()).type == pb.TASK_EVENT_TYPE_SNAPSHOT

        # One change: every stream is told, after one full read of the graph (before: one
        # per stream, plus one per stream and second meanwhile).
        before = full_reads.n
        await api.AddTasks(
            pb.AddTasksRequest(
                project_id=PROJECT,
                task_graph_id=graph_id,
                tasks=[pb.TaskSpec(key="late", title="late")],
                edges=[pb.TaskEdge(blocker_key="root", blocked_key="late")],
            )
        )
        async with asyncio.timeout(30):
            for stream in streams:
                event = await stream.read()
                assert event.type == pb.TASK_EVENT_TYPE_TASK_ADDED, event
                assert event.task.spec.key == "late"
                assert event.counts.total == TASKS + 2
        # One read for the change; a second only if a recheck raced the notification.
        assert full_reads.n - before <= 2, full_reads.n - before

        # Nothing changes: the rechecks read the stamp only, never the graph.
        stamps = Calls(monkeypatch, "graph_stamp", graph_id)
        before = full_reads.n
        async with asyncio.timeout(30):
            await stamps.reach(3)
        assert full_reads.n == before
        for stream in streams:
            stream.cancel()
    finally:
        await stack.close()
