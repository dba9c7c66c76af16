"""CreateTaskGraph and AddTasks with a request_id used before (AIP-155), on the in-process
stack of test_dispatcher_service: the same request replays the first answer; another
request under the id is refused (INVALID_ARGUMENT naming request_id) and adds nothing."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import grpc
import pytest

from agentfleet.testing.rpc_errors import assert_reused_request_id, rpc_error
from agentfleet.testing.services import Stack
from agentfleet.v1 import dispatcher_pb2 as pb
from tests.integration.test_dispatcher_service import PROJECT, client


async def graph_shape(pool: asyncpg.Pool) -> dict[str, list[str]]:
    """What CreateTaskGraph and AddTasks write: graphs, tasks, addition markers and blocks
    edges (their ids and keys; the dispatcher's own progress on them may go on)."""
    objects = await pool.fetch(
        "SELECT type, id::text, coalesce(key, properties ->> 'key', '') AS key "
        "FROM kb.graph_objects WHERE type IN ('TaskGraph', 'SpecTask', 'TaskGraphAddition')"
    )
    edges = await pool.fetch(
        "SELECT src_id::text || '->' || dst_id::text AS edge FROM kb.graph_relationships "
        "WHERE type = 'blocks'"
    )
    return {
        "objects": sorted(f"{r['type']} {r['id']} {r['key']}" for r in objects),
        "edges": sorted(r["edge"] for r in edges),
    }


def graph_request(**fields: Any) -> pb.CreateTaskGraphRequest:
    fields.setdefault("tasks", [pb.TaskSpec(key=k, title=f"do {k}") for k in ("a", "b")])
    fields.setdefault("edges", [pb.TaskEdge(blocker_key="a", blocked_key="b")])
    return pb.CreateTaskGraphRequest(project_id=PROJECT, request_id="g-1", **fields)


OTHER_GRAPHS: list[dict[str, Any]] = [
    {"title": "another title"},
    {"tasks": [pb.TaskSpec(key=k, title=f"do {k}") for k in ("a", "b", "c")]},
    {"tasks": [pb.TaskSpec(key="a", title="do a", priority=5), pb.TaskSpec(key="b", title="b")]},
    {"edges": []},
    {"max_parallel": 3},
    {"labels": {"team": "b"}},
]


@pytest.mark.parametrize("other", OTHER_GRAPHS)
async def test_a_graph_under_a_used_request_id_asking_otherwise_is_refused(
    stub_stack: Stack, db_pool: asyncpg.Pool, other: dict[str, Any]
) -> None:
    api = await client(stub_stack)
    first = await api.CreateTaskGraph(graph_request())
    before = await graph_shape(db_pool)

    for validate_only in (False, True):
        refused = await rpc_error(
            api.CreateTaskGraph(graph_request(validate_only=validate_only, **other))
        )
        assert_reused_request_id(refused)
    assert await graph_shape(db_pool) == before

    again = await api.CreateTaskGraph(graph_request())
    assert again.task_graph.id == first.task_graph.id
    validated = await api.CreateTaskGraph(graph_request(validate_only=True))
    assert not validated.HasField("task_graph")
    assert await graph_shape(db_pool) == before


async def test_concurrent_graphs_under_one_request_id_make_one_and_refuse_the_others(
    stub_stack: Stack, db_pool: asyncpg.Pool
) -> None:
    api = await client(stub_stack)
    titles = [f"graph {i}" for i in range(6)]
    outcomes = await asyncio.gather(
        *(api.CreateTaskGraph(graph_request(title=t)) for t in titles), return_exceptions=True
    )
    made = [o for o in outcomes if isinstance(o, pb.CreateTaskGraphResponse)]
    refused = [o for o in outcomes if isinstance(o, grpc.aio.AioRpcError)]
    assert len(made) == 1, outcomes
    assert len(refused) == len(titles) - 1, outcomes
    for error in refused:
        assert_reused_request_id(error)
    graphs = await db_pool.fetch(
        "SELECT properties ->> 'title' AS title FROM kb.graph_objects WHERE type = 'TaskGraph'"
    )
    assert [g["title"] for g in graphs] == [made[0].task_graph.title]


def add_request(graph_id: str, **fields: Any) -> pb.AddTasksRequest:
    fields.setdefault("tasks", [pb.TaskSpec(key="c", title="do c")])
    fields.setdefault("edges", [pb.TaskEdge(blocker_key="b", blocked_key="c")])
    return pb.AddTasksRequest(
        project_id=PROJECT, task_graph_id=graph_id, request_id="add-1", **fields
    )


async def test_an_addition_under_a_used_request_id_asking_otherwise_is_refused(
    stub_stack: Stack, db_pool: asyncpg.Pool
) -> None:
    api = await client(stub_stack)
    graph = (await api.CreateTaskGraph(graph_request())).task_graph
    first = await api.AddTasks(add_request(graph.id))
    before = await graph_shape(db_pool)

    others: list[dict[str, Any]] = [
        {"tasks": [pb.TaskSpec(key="d", title="do d")], "edges": []},
        {"tasks": [pb.TaskSpec(key="c", title="do c differently")]},
        {"edges": []},
        # Invalid as a new addition too (c exists now): the reuse is what it is told.
        {
            "tasks": [pb.TaskSpec(key="c", title="do c")],
            "edges": [pb.TaskEdge(blocker_key="a", blocked_key="c")],
        },
    ]
    for other in others:
        refused = await rpc_error(api.AddTasks(add_request(graph.id, **other)))
        assert_reused_request_id(refused)
    assert await graph_shape(db_pool) == before

    again = await api.AddTasks(add_request(graph.id))
    assert [t.id for t in again.tasks] == [t.id for t in first.tasks]
    assert await graph_shape(db_pool) == before


async def test_a_repeated_addition_replays_after_its_graph_was_cancelled(
    stub_stack: Stack, db_pool: asyncpg.Pool
) -> None:
    """A client retrying an AddTasks that succeeded (its answer lost) gets that answer even
    when the graph was cancelled since; a new addition to the cancelled graph is refused."""
    api = await client(stub_stack)
    graph = (await api.CreateTaskGraph(graph_request())).task_graph
    first = await api.AddTasks(add_request(graph.id))
    await api.CancelTaskGraph(pb.CancelTaskGraphRequest(project_id=PROJECT, task_graph_id=graph.id))
    before = await graph_shape(db_pool)

    again = await api.AddTasks(add_request(graph.id))
    assert [t.id for t in again.tasks] == [t.id for t in first.tasks]
    new = add_request(graph.id, tasks=[pb.TaskSpec(key="d", title="do d")], edges=[])
    new.request_id = "add-2"
    refused = await rpc_error(api.AddTasks(new))
    assert refused.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "cancelled" in (refused.details() or "")
    assert await graph_shape(db_pool) == before
