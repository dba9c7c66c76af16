"""Built-in tools through call_builtin against a real PostgreSQL."""

from __future__ import annotations

import asyncio
import itertools
import json
import uuid
from typing import Any

import asyncpg
import pytest

from agentfleet.errors import NotFound
from agentfleet.graph import TASK_GRAPH, GraphRepository, lock_task_dag
from agentfleet.testing.waiting import wait_for_query
from services.executor.registry.definitions import AgentDefinition, DefinitionRepository
from services.executor.registry.model_config import ModelConfig
from services.toolpool.builtin import ToolContext, ToolError, call_builtin

P, OTHER = "proj-a", "proj-b"
SUBTASK_AGENTS = ["web-browser", "research-assistant"]


async def agent_run(pool: asyncpg.Pool, project_id: str, **fields: Any) -> str:
    """A running run of a "planner" agent (defined with ``fields``); its id."""
    upserted = await DefinitionRepository(pool).upsert(
        project_id,
        AgentDefinition(
            name="planner", system_prompt="plan", model=ModelConfig(name="m"), **fields
        ),
    )
    return await pool.fetchval(
        "INSERT INTO kb.agent_runs (project_id, agent_definition_id, agent_name, status) "
        "VALUES ($1, $2, 'planner', 'running') RETURNING id::text",
        project_id,
        upserted.definition.id,
    )


@pytest.fixture
async def ctx(db_pool: asyncpg.Pool) -> ToolContext:
    """Calls made by a run whose definition may create tasks for SUBTASK_AGENTS."""
    run_id = await agent_run(db_pool, P, config={"subtask_agents": SUBTASK_AGENTS})
    return ToolContext(project_id=P, run_id=run_id, pool=db_pool)


@pytest.fixture
def other(db_pool: asyncpg.Pool) -> ToolContext:
    return ToolContext(project_id=OTHER, run_id=str(uuid.uuid4()), pool=db_pool)


async def call(ctx: ToolContext, name: str, **args: Any) -> dict[str, Any]:
    result = await call_builtin(ctx, name, args)
    json.dumps(result)  # every result goes to the model as JSON
    return result


async def refused(ctx: ToolContext, name: str, **args: Any) -> str:
    with pytest.raises(ToolError) as caught:
        await call_builtin(ctx, name, args)
    return caught.value.message


async def entity(ctx: ToolContext, type: str = "Doc", **properties: Any) -> dict[str, Any]:
    return (await call(ctx, "create_entity", type=type, properties=properties))["entity"]


async def test_ids_of_another_project_are_not_found(ctx: ToolContext, other: ToolContext) -> None:
    theirs = await entity(other, title="their secret")
    mine = await entity(ctx, title="mine")
    tid = theirs["id"]

    for name, args in [
        ("get_entity", {"id": tid}),
        # A project_id argument is ignored: scope comes from the run.
        ("get_entity", {"id": tid, "project_id": OTHER}),
        ("update_entity", {"id": tid, "expected_version": 1, "properties": {"title": "x"}}),
        ("delete_entity", {"id": tid}),
        ("get_related", {"id": tid}),
        ("graph_traverse", {"start_id": tid}),
        ("create_relationship", {"type": "cites", "src_id": mine["id"], "dst_id": tid}),
        ("create_subtasks", {"tasks": [{"key": "a", "title": "A", "blocked_by": [tid]}]}),
    ]:
        assert "not found" in await refused(ctx, name, **args), name

    listed = await call(ctx, "list_entities", project_id=OTHER)
    assert [e["id"] for e in listed["entities"]] == [mine["id"]]
    assert (await call(ctx, "search_hybrid", query="their secret"))["results"] == []
    unchanged = await call(other, "get_entity", id=tid)
    assert unchanged["entity"]["properties"] == {"title": "their secret"}
    assert unchanged["entity"]["version"] == 1


async def test_stale_version_is_a_clear_tool_error(ctx: ToolContext) -> None:
    doc = await entity(ctx, title="draft")
    updated = await call(
        ctx, "update_entity", id=doc["id"], expected_version=1, properties={"title": "v2"}
    )
    assert updated["entity"]["version"] == 2

    message = await refused(
        ctx, "update_entity", id=doc["id"], expected_version=1, properties={"title": "lost"}
    )
    assert "expected version 1, current version is 2" in message
    got = await call(ctx, "get_entity", id=doc["id"])
    assert got["entity"]["properties"] == {"title": "v2"}


async def test_bad_ids_and_unknown_tools(ctx: ToolContext) -> None:
    assert "id: 'nope' is not a valid id" in await refused(ctx, "get_entity", id="nope")
    with pytest.raises(NotFound, match="no built-in tool named 'nope'"):
        await call_builtin(ctx, "nope", {})


async def test_list_entities_pages_see_each_entity_once(ctx: ToolContext) -> None:
    created = {(await entity(ctx, "Item", n=i))["id"] for i in range(7)}
    await entity(ctx, "Other")
    seen: list[str] = []
    cursor = None
    while True:
        args: dict[str, Any] = {"type": "Item", "limit": 3}
        if cursor:
            args["cursor"] = cursor
        page = await call(ctx, "list_entities", **args)
        seen += [e["id"] for e in page["entities"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert sorted(seen) == sorted(created)
    filtered = await call(ctx, "list_entities", type="Item", filters={"n": 3})
    assert [e["properties"]["n"] for e in filtered["entities"]] == [3]


async def test_relationships_and_bounded_traversal(ctx: ToolContext) -> None:
    # A chain of 8 with a side branch at each node.
    chain = [await entity(ctx, "Step", name=f"s{i}") for i in range(8)]
    for a, b in itertools.pairwise(chain):
        await call(ctx, "create_relationship", type="next", src_id=a["id"], dst_id=b["id"])
        side = await entity(ctx, "Note", name=f"note on {a['properties']['name']}")
        await call(ctx, "create_relationship", type="note", src_id=a["id"], dst_id=side["id"])
    again = await call(
        ctx, "create_relationship", type="next", src_id=chain[0]["id"], dst_id=chain[1]["id"]
    )
    assert again["created"] is False

    walk = await call(
        ctx, "graph_traverse", start_id=chain[0]["id"], relationship_types=["next"], max_depth=3
    )
    assert [(n["properties"]["name"], n["depth"]) for n in walk["nodes"]] == [
        ("s0", 0),
        ("s1", 1),
        ("s2", 2),
        ("s3", 3),
    ]
    assert len(walk["edges"]) == 3
    assert walk["truncated"] is False

    capped = await call(ctx, "graph_traverse", start_id=chain[0]["id"], max_depth=5, max_nodes=4)
    assert len(capped["nodes"]) == 4
    assert capped["truncated"] is True
    assert "max_depth: must be at most 5" in await refused(
        ctx, "graph_traverse", start_id=chain[0]["id"], max_depth=9
    )

    related = await call(ctx, "get_related", id=chain[1]["id"], direction="both")
    assert {(r["direction"], r["relationship"]["type"]) for r in related["related"]} == {
        ("in", "next"),
        ("out", "next"),
        ("out", "note"),
    }
    await call(
        ctx, "delete_relationship", type="next", src_id=chain[0]["id"], dst_id=chain[1]["id"]
    )
    assert "not found" in await refused(
        ctx, "delete_relationship", type="next", src_id=chain[0]["id"], dst_id=chain[1]["id"]
    )


async def test_hybrid_search_finds_a_misspelling(ctx: ToolContext) -> None:
    await entity(ctx, title="Kubernetes operators", description="Reconcile loops in Go")
    for title in ("Kafka consumer groups", "Operating theatre rota", "Kubectl cheat sheet"):
        await entity(ctx, title=title)

    assert (await call(ctx, "search_fts", query="kubernetse"))["results"] == []
    hybrid = await call(ctx, "search_hybrid", query="kubernetse")
    assert hybrid["results"][0]["entity"]["properties"]["title"] == "Kubernetes operators"
    fts = await call(ctx, "search_fts", query="reconcile loops")
    assert [r["entity"]["properties"]["title"] for r in fts["results"]] == ["Kubernetes operators"]


async def _count(pool: asyncpg.Pool, table: str) -> int:
    return await pool.fetchval(f"SELECT count(*) FROM kb.{table}")


async def test_create_subtasks_builds_the_dag(ctx: ToolContext, db_pool: asyncpg.Pool) -> None:
    result = await call(
        ctx,
        "create_subtasks",
        tasks=[
            {"key": "papers", "title": "Search papers", "assigned_agent": "web-browser"},
            {"key": "cases", "title": "Search case studies", "tags": ["web"]},
            {"key": "bench", "title": "Run benchmarks", "blocked_by": ["papers"], "priority": 5},
        ],
        synthesis={"title": "Synthesize report", "assigned_agent": "research-assistant"},
    )
    keys = {t["key"]: t["id"] for t in result["tasks"]}
    synth = result["synthesis_task"]
    assert set(keys) == {"papers", "cases", "bench"}
    assert synth["key"] == "synthesize"
    expected_edges = {
        (keys["papers"], keys["bench"]),
        *((keys[k], synth["id"]) for k in keys),
    }
    assert {(e["blocker_id"], e["blocked_id"]) for e in result["edges"]} == expected_edges

    stored = await db_pool.fetch(
        "SELECT src_id::text, dst_id::text FROM kb.graph_relationships "
        "WHERE project_id = $1 AND type = 'blocks'",
        P,
    )
    assert {(r["src_id"], r["dst_id"]) for r in stored} == expected_edges
    bench = (await call(ctx, "get_entity", id=keys["bench"]))["entity"]
    assert bench["type"] == "SpecTask"
    assert bench["properties"] == {
        "key": "bench",
        "title": "Run benchmarks",
        "description": "",
        "status": "pending",
        "priority": 5,
        "max_retries": 2,
        "retry_count": 0,
        "tags": [],
        "created_by_run_id": ctx.run_id,
        "allowed_agents": SUBTASK_AGENTS,
        "graph_id": result["graph_id"],
    }
    pending = await call(ctx, "list_entities", type="SpecTask", filters={"status": "pending"})
    assert len(pending["entities"]) == 4


async def test_create_subtasks_rejects_a_cycle_and_stores_nothing(
    ctx: ToolContext, db_pool: asyncpg.Pool
) -> None:
    message = await refused(
        ctx,
        "create_subtasks",
        tasks=[
            {"key": "a", "title": "A", "blocked_by": ["c"]},
            {"key": "b", "title": "B", "blocked_by": ["a"]},
            {"key": "c", "title": "C", "blocked_by": ["b"]},
        ],
        synthesis={"title": "S"},
    )
    assert "cycle" in message
    assert all(k in message for k in ("a ->", "b ->", "c ->"))
    assert await _count(db_pool, "graph_objects") == 0
    assert await _count(db_pool, "graph_relationships") == 0


async def test_create_subtasks_cycle_through_existing_tasks(
    ctx: ToolContext, db_pool: asyncpg.Pool
) -> None:
    first = await call(
        ctx,
        "create_subtasks",
        tasks=[{"key": "x", "title": "X"}, {"key": "y", "title": "Y", "blocked_by": ["x"]}],
    )
    x, y = (t["id"] for t in first["tasks"])
    before = (await _count(db_pool, "graph_objects"), await _count(db_pool, "graph_relationships"))

    # y waits for x; a new task after y that x must wait for closes x -> y -> n -> x.
    message = await refused(
        ctx, "create_subtasks", tasks=[{"key": "n", "title": "N", "blocked_by": [y], "blocks": [x]}]
    )
    assert f"task {x}" in message
    assert "n ->" in message
    after = (await _count(db_pool, "graph_objects"), await _count(db_pool, "graph_relationships"))
    assert after == before

    # create_relationship cannot write blocks edges at all (tests/security covers the rest).
    assert "reserved" in await refused(
        ctx, "create_relationship", type="blocks", src_id=y, dst_id=x
    )
    # An acyclic addition next to them is fine.
    ok = await call(
        ctx, "create_subtasks", tasks=[{"key": "z", "title": "Z", "blocked_by": [x], "blocks": [y]}]
    )
    assert len(ok["edges"]) == 2


async def test_create_subtasks_joins_the_graph_of_the_runs_task(
    ctx: ToolContext, db_pool: asyncpg.Pool
) -> None:
    graph = await GraphRepository(db_pool).create_object(
        P, type=TASK_GRAPH, properties={"title": "research", "status": "active"}
    )
    graph = graph.to_json()
    parent = await call(
        ctx,
        "create_subtasks",
        graph_id=graph["id"],
        tasks=[{"key": "research", "title": "Research WASM"}],
    )
    assert parent["graph_id"] == graph["id"]
    run_id = await db_pool.fetchval(
        "INSERT INTO kb.agent_runs (project_id, agent_definition_id, agent_name, task_id) "
        "SELECT $1, agent_definition_id, agent_name, $2 FROM kb.agent_runs WHERE id = $3 "
        "RETURNING id::text",
        P,
        uuid.UUID(parent["tasks"][0]["id"]),
        uuid.UUID(ctx.run_id),
    )
    run_ctx = ToolContext(project_id=P, run_id=run_id, pool=db_pool)

    child = await call(run_ctx, "create_subtasks", tasks=[{"key": "papers", "title": "Papers"}])
    assert child["graph_id"] == graph["id"]
    stored = (await call(ctx, "get_entity", id=child["tasks"][0]["id"]))["entity"]
    assert stored["properties"]["graph_id"] == graph["id"]
    assert stored["properties"]["created_by_run_id"] == run_id
    assert "already used" in await refused(
        run_ctx, "create_subtasks", tasks=[{"key": "research", "title": "Again"}]
    )
    assert "graph_id" in await refused(
        ctx, "create_subtasks", graph_id=str(uuid.uuid4()), tasks=[{"key": "q", "title": "Q"}]
    )


async def test_concurrent_blocks_edges_never_close_a_cycle(
    ctx: ToolContext, db_pool: asyncpg.Pool
) -> None:
    made = await call(ctx, "create_subtasks", tasks=[{"key": k, "title": k} for k in "ab"])
    a, b = (t["id"] for t in made["tasks"])
    # Hold the project's DAG lock so both writers are provably in flight at once, each
    # having to wait for it before its cycle check. a -> n1 -> b and b -> n2 -> a are each
    # acyclic; together they close a cycle.
    async with db_pool.acquire() as holder, holder.transaction():
        await lock_task_dag(holder, P)
        calls = [
            asyncio.ensure_future(
                call(
                    ctx,
                    "create_subtasks",
                    tasks=[{"key": key, "title": key, "blocked_by": [src], "blocks": [dst]}],
                )
            )
            for key, src, dst in (("n1", a, b), ("n2", b, a))
        ]
        await _wait_for_lock_waiters(db_pool, 2)
    results = await asyncio.gather(*calls, return_exceptions=True)
    assert sorted(type(r).__name__ for r in results) == ["ToolError", "dict"]
    assert await _count(db_pool, "graph_relationships") == 2


async def _wait_for_lock_waiters(pool: asyncpg.Pool, count: int, timeout_s: float = 10) -> None:
    """Until ``count`` sessions wait for an advisory lock (polling pg_locks, with a deadline)."""
    await wait_for_query(
        pool,
        "SELECT count(*) >= $1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted",
        count,
        timeout_s=timeout_s,
        what=f"{count} advisory lock waiters",
    )
