"""Built-in tools in the executor's process (AGENTFLEET_EXECUTOR_BUILTIN_TOOLS=inprocess)
against the toolpool over gRPC: the same agent run records the same tool results, events
and call rows either way, and a call is refused alike (a built-in tool outside the run's
whitelist, a run that is not running, another project); the project always comes from the
run, never from the arguments. Other tools still go to the toolpool. A definition naming
only built-in tools exactly is resolved in the executor, to the same tools."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import grpc
import pytest
import pytest_asyncio

from agentfleet import events
from agentfleet.config import load_settings
from agentfleet.gemini_stub import Call, GeminiStub, Reply, Script
from agentfleet.gemini_stub.request import StubRequest
from agentfleet.testing.gemini import model_client_for
from agentfleet.testing.services import Stack, free_port, start_stack
from services.executor.queue import RunQueue
from services.executor.registry.definitions import AgentDefinition, DefinitionRepository
from services.executor.registry.model_config import ModelConfig
from services.executor.run_path.loop import AgentLoop, RunControl
from services.executor.run_server import tool_gateway
from services.executor.runs import RunRecord, StartRunParams
from services.executor.tools.builtin_tools import InProcessBuiltinTools
from services.executor.tools.tool_gateway import (
    GrpcToolGateway,
    ToolCallRequest,
    ToolGateway,
    ToolResolutionError,
)

PROJECT = "inproc"
OTHER = "inproc-other"
OWNER = "test-worker"
TOOLS = ["get_entity", "list_entities"]


@dataclasses.dataclass(frozen=True, slots=True)
class Gateways:
    toolpool: GrpcToolGateway
    inprocess: InProcessBuiltinTools
    entity: str
    """An entity of PROJECT with numbers in its properties."""
    foreign: str
    """An entity of OTHER."""


@pytest_asyncio.fixture
async def gateways(database_url: str, db_pool: asyncpg.Pool) -> AsyncIterator[Gateways]:
    stack: Stack = await start_stack(database_url=database_url, pool=db_pool, names=("toolpool",))
    try:
        channel = stack.channel("toolpool", token=stack.service_tokens.get("executor"))
        toolpool = GrpcToolGateway(channel)
        inprocess = tool_gateway(db_pool, channel, where="inprocess")
        assert isinstance(inprocess, InProcessBuiltinTools)
        entity, foreign = [
            str(
                await db_pool.fetchval(
                    "INSERT INTO kb.graph_objects (project_id, type, properties) "
                    "VALUES ($1, 'Note', $2) RETURNING id",
                    project,
                    {"title": f"a note of {project}", "count": 3, "ratio": 2.5},
                )
            )
            for project in (PROJECT, OTHER)
        ]
        yield Gateways(toolpool=toolpool, inprocess=inprocess, entity=entity, foreign=foreign)
    finally:
        await stack.close()


def test_built_in_tools_run_in_process_by_default() -> None:
    assert load_settings({}).executor_builtin_tools == "inprocess"
    off = load_settings({"AGENTFLEET_EXECUTOR_BUILTIN_TOOLS": "toolpool"})
    assert off.executor_builtin_tools == "toolpool"


async def _run(
    pool: asyncpg.Pool, *, agent: str, tools: list[str], claim: bool = True
) -> RunRecord:
    stored = await DefinitionRepository(pool).upsert(
        PROJECT,
        AgentDefinition(name=agent, model=ModelConfig(name="gemini-test"), tools=tools),
    )
    queue = RunQueue(pool)
    run, _ = await queue.enqueue(
        StartRunParams(
            project_id=PROJECT,
            agent_name=agent,
            agent_definition_id=str(stored.definition.id),
            input="go",
        )
    )
    if not claim:
        return run
    (claimed,) = await queue.claim_next(OWNER, 30.0)
    assert claimed.id == run.id
    return claimed


def _script(gateways: Gateways) -> Script:
    def policy(request: StubRequest) -> Reply:
        if request.turn > 0:
            return Reply(text="done")
        return Reply(
            calls=[
                Call("get_entity", {"id": gateways.entity}, id="c1"),
                # The project comes from the run: another project's entity is not found,
                # whatever the arguments say.
                Call("get_entity", {"id": gateways.foreign, "project_id": OTHER}, id="c2"),
                Call("list_entities", {"limit": "many"}, id="c3"),
            ]
        )

    return Script(name="reader", match_system="reads notes", policy=policy)


async def _recorded(pool: asyncpg.Pool, run_id: str) -> tuple[list[Any], list[Any]]:
    """The run's tool events and call rows, without what differs between two runs."""
    stored = await events.read_events(pool, project_id=PROJECT, run_id=run_id)
    tool_events = [
        dataclasses.replace(e.event, duration_ms=0, agent_name="")
        if isinstance(e.event, events.ToolResponse)
        else dataclasses.replace(e.event, agent_name="")
        for e in stored
        if isinstance(e.event, events.ToolRequest | events.ToolResponse)
    ]
    rows = await pool.fetch(
        "SELECT tool_call_id, step_number, tool_name, source, input, output, status, error "
        "FROM kb.agent_run_tool_calls WHERE run_id = $1 ORDER BY tool_call_id",
        run_id,
    )
    return tool_events, [dict(r) for r in rows]


async def test_the_same_run_records_the_same_either_way(
    db_pool: asyncpg.Pool, gemini_stub: GeminiStub, gateways: Gateways
) -> None:
    gemini_stub.add_script(_script(gateways))
    recorded = []
    for mode, gateway in (("toolpool", gateways.toolpool), ("inprocess", gateways.inprocess)):
        run = await _run(db_pool, agent=f"reader-{mode}", tools=TOOLS)
        await db_pool.execute(
            "UPDATE kb.agent_definitions SET system_prompt = 'reads notes' WHERE name = $1",
            run.agent_name,
        )
        model = model_client_for(gemini_stub)
        try:
            loop = AgentLoop(
                pool=db_pool,
                definitions=DefinitionRepository(db_pool),
                tools=gateway,
                model=model,
                owner=OWNER,
            )
            finished = await loop.execute(run, RunControl())
        finally:
            await model.aclose()
        assert finished is not None
        assert finished.status == "completed"
        recorded.append(await _recorded(db_pool, run.id))
    (toolpool_events, toolpool_rows), (inprocess_events, inprocess_rows) = recorded
    assert inprocess_events == toolpool_events
    assert inprocess_rows == toolpool_rows
    found, foreign, bad = (r for r in toolpool_events if isinstance(r, events.ToolResponse))
    assert found.result is not None
    # A Struct carries 3 as a double; it reads back whole (issue 37).
    assert type(found.result["output"]["entity"]["properties"]["count"]) is int
    assert "not found" in foreign.error
    assert "limit" in bad.error


async def _both(gateways: Gateways, request: ToolCallRequest) -> tuple[Any, Any]:
    outcomes = []
    gateway: ToolGateway
    for gateway in (gateways.toolpool, gateways.inprocess):
        outcome = await gateway.call(request)
        outcomes.append(dataclasses.replace(outcome, duration_ms=0))
    return outcomes[0], outcomes[1]


def _request(run: RunRecord, tool: str, **arguments: Any) -> ToolCallRequest:
    return ToolCallRequest(
        project_id=run.project_id,
        run_id=run.id,
        tool_call_id=f"call-{uuid.uuid4().hex[:8]}",
        tool_name=tool,
        arguments=arguments,
    )


async def test_refusals_read_the_same_either_way(db_pool: asyncpg.Pool, gateways: Gateways) -> None:
    run = await _run(db_pool, agent="narrow", tools=["get_entity"])
    outside = await _both(gateways, _request(run, "delete_entity", id=gateways.entity))
    assert outside[0] == outside[1]
    assert outside[0].failed
    assert outside[0].error.startswith("PERMISSION_DENIED: agent 'narrow' (depth 0)")
    other_project = dataclasses.replace(
        _request(run, "get_entity", id=gateways.foreign), project_id=OTHER
    )
    elsewhere = await _both(gateways, other_project)
    assert elsewhere[0] == elsewhere[1]
    assert elsewhere[0].error.startswith("NOT_FOUND: run ")
    not_json = await _both(gateways, _request(run, "get_entity", id={1, 2}))
    assert not_json[0] == not_json[1]
    assert not_json[0].error.startswith("arguments are not a JSON object")
    # Not a built-in tool: the toolpool answers, in both modes.
    unknown = await _both(gateways, _request(run, "some_server__tool"))
    assert unknown[0] == unknown[1]
    assert unknown[0].failed
    queued = await _run(db_pool, agent="not-started", tools=["get_entity"], claim=False)
    stopped = await _both(gateways, _request(queued, "get_entity", id=gateways.entity))
    assert stopped[0] == stopped[1]
    assert stopped[0].error.startswith("FAILED_PRECONDITION: run ")
    # And the entity was never deleted by the refused call.
    assert await db_pool.fetchval(
        "SELECT count(*) FROM kb.graph_objects WHERE id = $1", gateways.entity
    )


EXACT_NAMES = [
    TOOLS,
    ["spawn_agents", "list_available_agents", "get_entity"],
    ["create_subtasks", "delete_entity"],
]


async def test_exact_built_in_names_resolve_here_to_what_the_toolpool_resolves(
    db_pool: asyncpg.Pool, gateways: Gateways
) -> None:
    for patterns in EXACT_NAMES:
        for depth in (0, 1, 2, 3):
            here = await gateways.inprocess.resolve(
                project_id=PROJECT, patterns=patterns, depth=depth
            )
            there = await gateways.toolpool.resolve(
                project_id=PROJECT, patterns=patterns, depth=depth
            )
            assert here == there, (patterns, depth)
    # The coordination tools leave a child's list as the toolpool says (DESIGN §6).
    deep = await gateways.inprocess.resolve(project_id=PROJECT, patterns=EXACT_NAMES[1], depth=2)
    assert "spawn_agents" not in {t.name for t in deep}


async def test_only_exact_built_in_names_skip_the_toolpool(db_pool: asyncpg.Pool) -> None:
    # A toolpool nothing listens for: what still resolves was resolved without it.
    async with grpc.aio.insecure_channel(f"127.0.0.1:{free_port()}") as channel:
        gateway = InProcessBuiltinTools(db_pool, GrpcToolGateway(channel, connect_wait_s=0.1))
        resolved = await gateway.resolve(project_id=PROJECT, patterns=TOOLS, depth=0)
        assert [t.name for t in resolved] == sorted(TOOLS)
        assert all(t.source == "builtin" and t.parameters for t in resolved)
        for needs_catalog in (["get_*"], ["get_entity", "docs__search"]):
            with pytest.raises(ToolResolutionError, match="cannot resolve tools"):
                await gateway.resolve(project_id=PROJECT, patterns=needs_catalog, depth=0)
