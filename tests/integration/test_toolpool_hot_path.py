"""CallTool's steady-state cost (issue 3): once a run's scope and the caller's token are
cached, a call sends the database nothing but the tool's own statement.

Statements are counted with asyncpg query loggers on the toolpool's own pool, so the figure
is exact, not timed. asyncpg's reset on release is counted apart: it belongs to the pool.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest
import pytest_asyncio
from google.protobuf import struct_pb2

from agentfleet.errors import FailedPrecondition
from agentfleet.testing.services import Stack, start_stack
from agentfleet.v1 import toolpool_pb2, toolpool_pb2_grpc
from services.toolpool.runs import RunScopes

PROJECT = "hot-path"
CALLS = 20
POOL_RESET = "pg_advisory_unlock_all()"
"""The statement asyncpg's pool sends when a connection is released."""


class Recorded:
    """A pool whose connections record every statement they send."""

    def __init__(self) -> None:
        self.statements: list[str] = []

    async def _init(self, conn: asyncpg.Connection) -> None:
        for typename in ("json", "jsonb"):
            await conn.set_type_codec(
                typename, schema="pg_catalog", encoder=json.dumps, decoder=json.loads
            )
        conn.add_query_logger(lambda record: self.statements.append(record.query))

    async def pool(self, url: str) -> asyncpg.Pool:
        pool = await asyncpg.create_pool(url, min_size=1, max_size=10, init=self._init)
        assert pool is not None
        return pool


@pytest_asyncio.fixture
async def recorded_stack(database_url: str) -> AsyncIterator[tuple[Stack, Recorded]]:
    recorded = Recorded()
    pool = await recorded.pool(database_url)
    stack = await start_stack(database_url=database_url, pool=pool, names=("toolpool",))
    try:
        yield stack, recorded
    finally:
        await stack.close()
        await pool.close()


async def _running_run(pool: asyncpg.Pool, tools: list[str]) -> str:
    definition = await pool.fetchval(
        "INSERT INTO kb.agent_definitions (project_id, name, tools) "
        "VALUES ($1, 'reader', $2) RETURNING id",
        PROJECT,
        tools,
    )
    return str(
        await pool.fetchval(
            """INSERT INTO kb.agent_runs (project_id, agent_definition_id, agent_name, status,
                   input, lease_owner, lease_expires_at, started_at)
               VALUES ($1, $2, 'reader', 'running', 'x', 'test', now() + interval '1 hour',
                       now())
               RETURNING id""",
            PROJECT,
            definition,
        )
    )


async def test_a_steady_call_sends_only_the_tools_own_statement(
    recorded_stack: tuple[Stack, Recorded],
) -> None:
    stack, recorded = recorded_stack
    run_id = await _running_run(stack.pool, ["get_entity"])
    entity = await stack.pool.fetchval(
        "INSERT INTO kb.graph_objects (project_id, type, properties) "
        "VALUES ($1, 'Note', '{}') RETURNING id::text",
        PROJECT,
    )
    stub = toolpool_pb2_grpc.ToolPoolServiceStub(
        stack.channel("toolpool", token=stack.service_tokens["executor"])
    )
    arguments = struct_pb2.Struct()
    arguments.update({"id": entity})

    async def call() -> None:
        reply = await stub.CallTool(
            toolpool_pb2.CallToolRequest(
                project_id=PROJECT,
                run_id=run_id,
                tool_call_id=f"c-{uuid.uuid4().hex[:6]}",
                tool_name="get_entity",
                arguments=arguments,
            )
        )
        assert not reply.is_error, reply.error_message
        assert reply.result["entity"]["id"] == entity

    await call()  # the first call reads the token and the run's scope
    recorded.statements.clear()
    for _ in range(CALLS):
        await call()
    ours = [s for s in recorded.statements if POOL_RESET not in s]
    assert len(ours) == CALLS, ours
    assert all("kb.graph_objects" in s for s in ours), ours


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_a_cached_scope_follows_definition_and_status_changes_within_its_ttl(
    db_pool: asyncpg.Pool,
) -> None:
    run_id = await _running_run(db_pool, ["get_entity"])
    clock = Clock()
    scopes = RunScopes(db_pool, ttl_s=2.0, clock=clock)
    assert (await scopes.get_running(PROJECT, run_id)).tool_patterns == ("get_entity",)

    await db_pool.execute(
        "UPDATE kb.agent_definitions SET tools = '{search_fts}' WHERE project_id = $1", PROJECT
    )
    clock.now += 1.9
    assert (await scopes.get_running(PROJECT, run_id)).tool_patterns == ("get_entity",)
    clock.now += 0.2
    assert (await scopes.get_running(PROJECT, run_id)).tool_patterns == ("search_fts",)

    await db_pool.execute("UPDATE kb.agent_runs SET status = 'paused' WHERE id = $1::uuid", run_id)
    clock.now += 2.1
    with pytest.raises(FailedPrecondition):
        await scopes.get_running(PROJECT, run_id)
