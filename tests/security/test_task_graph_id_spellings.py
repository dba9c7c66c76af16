"""AddTasks checked task_graph_id with parse_id, which accepts other spellings of a UUID
(uppercase, braces, urn:uuid:, no hyphens), then stored that text in each task's graph_id
(review finding). Every reader compares it as text, so the tasks belonged to no graph: not
in GetTaskGraph or kb.task_graph_states, not cancelled by CancelTaskGraph, yet the claim
(which reads ids case-insensitively) dispatched the uppercase ones; and the graph's own
tasks were not found either, so keys, edges and the size limit went unchecked against
them. Now every RPC that takes a graph id, and create_subtasks, use its canonical form."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import asyncpg
import grpc
import pytest

from agentfleet.testing.services import Stack, start_stack
from agentfleet.v1 import dispatcher_pb2 as pb
from agentfleet.v1 import dispatcher_pb2_grpc
from tests.security.test_subtasks_graph_size import P, new_graph, task_count


def spellings(graph_id: str) -> list[str]:
    """Other texts parse_id (uuid.UUID) reads as the same id."""
    u = uuid.UUID(graph_id)
    return [str(u).upper(), "{" + str(u) + "}", u.urn, u.hex]


@pytest.fixture
async def dispatcher_api(
    database_url: str, db_pool: asyncpg.Pool
) -> AsyncIterator[dispatcher_pb2_grpc.DispatcherServiceStub]:
    stack: Stack = await start_stack(database_url=database_url, pool=db_pool, names=("dispatcher",))
    try:
        token = await stack.create_token(P, role="member")
        yield dispatcher_pb2_grpc.DispatcherServiceStub(stack.channel("dispatcher", token=token))
    finally:
        await stack.close()


async def test_every_spelling_of_a_graph_id_reaches_the_same_graph_and_its_tasks(
    db_pool: asyncpg.Pool, dispatcher_api: dispatcher_pb2_grpc.DispatcherServiceStub
) -> None:
    api = dispatcher_api
    graph_id = await new_graph(db_pool, 1, gate=True)
    other = spellings(graph_id)
    for i, spelling in enumerate(other):
        # Each added task waits for t0 (pending behind the gate): the running dispatcher
        # leaves them pending, and CancelTaskGraph below must reach them.
        added = await api.AddTasks(
            pb.AddTasksRequest(
                project_id=P,
                task_graph_id=spelling,
                tasks=[pb.TaskSpec(key=f"added{i}", title="x")],
                edges=[pb.TaskEdge(blocker_key="t0", blocked_key=f"added{i}")],
            )
        )
        assert [t.task_graph_id for t in added.tasks] == [graph_id]
        assert added.task_graph.counts.total == i + 3
    # A key the graph already has is refused whatever the spelling.
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await api.AddTasks(
            pb.AddTasksRequest(
                project_id=P, task_graph_id=other[0], tasks=[pb.TaskSpec(key="t0", title="x")]
            )
        )
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert await task_count(db_pool, graph_id) == 2 + len(other)
    assert not await db_pool.fetchval(
        "SELECT count(*) FROM kb.graph_objects WHERE type = 'SpecTask' "
        "AND properties ->> 'graph_id' <> $1",
        graph_id,
    )

    for spelling in other:
        got = await api.GetTaskGraph(pb.GetTaskGraphRequest(project_id=P, task_graph_id=spelling))
        assert got.task_graph.id == graph_id
        assert got.task_graph.counts.total == 2 + len(other)

    await api.CancelTaskGraph(pb.CancelTaskGraphRequest(project_id=P, task_graph_id=other[3]))
    assert await db_pool.fetch(
        "SELECT DISTINCT status FROM kb.graph_objects WHERE type = 'SpecTask' "
        "AND properties ->> 'graph_id' = $1 AND properties ->> 'key' <> 'gate'",
        graph_id,
    ) == [("cancelled",)]

    for bad in ("", "not-an-id", graph_id + "0"):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await api.GetTaskGraph(pb.GetTaskGraphRequest(project_id=P, task_graph_id=bad))
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "task_graph_id" in (caught.value.details() or "")
