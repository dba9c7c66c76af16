"""What the approval and thread tests share: the four services in-process (auth on) with the
stub Gemini, tokens for each kind of caller, an agent whose create_entity calls wait for a
person, and waits on database conditions with a deadline."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import pytest
from google.protobuf import json_format

from agentfleet.auth import TokenStore
from agentfleet.gemini_stub import Call, GeminiStub, Reply, Script, StubRequest
from agentfleet.testing.services import Stack, start_stack
from agentfleet.testing.waiting import wait_for_query
from agentfleet.v1 import executor_pb2, executor_pb2_grpc, history_pb2_grpc
from services.executor.registry.definitions import AgentDefinition, DefinitionRepository

PROJECT = "tenant-a"
OTHER = "tenant-b"
CLERK_PROMPT = "You are clerk."
HELD_ENTITY = {"type": "Note", "key": "from-model"}


def clerk_reply(request: StubRequest) -> Reply:
    """First turn: ask for create_entity; then answer with what the tool said."""
    responses = request.function_responses()
    if not responses:
        return Reply(text="creating the note", calls=[Call("create_entity", HELD_ENTITY)])
    return Reply(text=f"done: {responses[-1].get('response')}")


@dataclass(kw_only=True, slots=True)
class Deployment:
    stack: Stack
    stub: GeminiStub
    pool: asyncpg.Pool
    tokens: dict[str, str] = field(default_factory=dict)

    def executor(self, caller: str = "admin") -> executor_pb2_grpc.ExecutorServiceStub:
        channel = self.stack.channel("executor", token=self.tokens[caller])
        return executor_pb2_grpc.ExecutorServiceStub(channel)

    def history(self, caller: str = "admin") -> history_pb2_grpc.HistoryServiceStub:
        channel = self.stack.channel("history", token=self.tokens[caller])
        return history_pb2_grpc.HistoryServiceStub(channel)

    async def define(self, name: str, **fields: Any) -> None:
        await DefinitionRepository(self.pool).upsert(
            fields.pop("project", PROJECT), AgentDefinition(name=name, **fields)
        )

    async def define_clerk(self, approvals: dict[str, Any] | None = None) -> None:
        rules = {"rules": [{"tools": ["create_entity"]}]} if approvals is None else approvals
        await self.define(
            "clerk",
            system_prompt=CLERK_PROMPT,
            tools=["create_entity"],
            config={"approvals": rules},
        )

    async def trigger(self, agent: str, *, project: str = PROJECT, **fields: Any) -> str:
        run = await self.executor().TriggerRun(
            executor_pb2.StartRunRequest(project_id=project, agent_name=agent, **fields)
        )
        return run.id

    async def held_call(self, run_id: str) -> asyncpg.Record:
        await wait_for_query(
            self.pool, "SELECT status = 'waiting' FROM kb.agent_runs WHERE id = $1", run_id
        )
        return await self.pool.fetchrow(
            "SELECT * FROM kb.agent_run_tool_calls WHERE run_id = $1 "
            "AND status = 'awaiting_approval'",
            run_id,
        )

    def decision(self, run_id: str, tool_call_id: str, **fields: Any) -> Any:
        arguments = fields.pop("arguments", None)
        request = executor_pb2.DecideToolCallRequest(
            project_id=fields.pop("project_id", PROJECT),
            run_id=run_id,
            tool_call_id=tool_call_id,
            **fields,
        )
        if arguments is not None:
            json_format.ParseDict(arguments, request.arguments)
        return request


async def snapshot(pool: asyncpg.Pool) -> dict[str, list[dict[str, Any]]]:
    """Every row an approval or a thread could change, to prove an attack changed none."""
    tables = {
        "agent_runs": "SELECT * FROM kb.agent_runs ORDER BY id",
        "agent_run_tool_calls": "SELECT * FROM kb.agent_run_tool_calls ORDER BY id",
        "agent_run_events": "SELECT * FROM kb.agent_run_events ORDER BY run_id, seq",
        "graph_objects": "SELECT * FROM kb.graph_objects ORDER BY id",
    }
    return {name: [dict(r) for r in await pool.fetch(sql)] for name, sql in tables.items()}


@pytest.fixture
async def deployment(database_url: str, db_pool: asyncpg.Pool) -> AsyncIterator[Deployment]:
    stub = GeminiStub()
    await stub.start()
    stub.add_script(Script(name="clerk", match_system=CLERK_PROMPT, policy=clerk_reply))
    stack = await start_stack(
        database_url=database_url,
        pool=db_pool,
        environ={"AGENTFLEET_GEMINI_BASE_URL": stub.base_url or ""},
    )
    try:
        deployment = Deployment(stack=stack, stub=stub, pool=db_pool)
        for project, prefix in ((PROJECT, ""), (OTHER, "other-")):
            deployment.tokens[f"{prefix}admin"] = await stack.create_token(project, "admin")
            deployment.tokens[f"{prefix}member"] = await stack.create_token(project, "member")
        for service in ("dispatcher", "executor"):
            created = await TokenStore(db_pool).create(
                project_id=None, role="service", name=f"stolen-{service}", service=service
            )
            deployment.tokens[service] = created.token
        yield deployment
    finally:
        await stack.close()
        await stub.stop()
