"""An in-process executor for coordination tests: a real RunWorker (claims, leases, cancel
NOTIFY) running the AgentLoop with its Coordinator and FlowRunner on the test database, the
stub Gemini server as the model, and a fake ToolPool that resolves the coordination tools
with the real catalog rules (services.toolpool.catalog)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from agentfleet import events
from agentfleet.gemini_stub import GeminiStub
from agentfleet.postgres.db import Listener
from agentfleet.runs.run_watch import RunWatch
from agentfleet.testing.gemini import model_client_for
from agentfleet.testing.waiting import wait_for, wait_for_query
from services.executor.coordination.children import ChildRuns
from services.executor.coordination.coordination import Coordinator
from services.executor.coordination.flows import FlowRunner
from services.executor.queue import RunQueue
from services.executor.registry.definitions import AgentDefinition, DefinitionRepository
from services.executor.registry.model_config import ModelConfig
from services.executor.run_path.loop import AgentLoop
from services.executor.runs import RunRecord, StartRunParams
from services.executor.tools.tool_gateway import InMemoryToolGateway, ResolvedTool
from services.executor.worker import RunWorker
from services.toolpool import catalog

PROJECT = "coord"


async def _echo(args: dict[str, Any]) -> dict[str, Any]:
    return {"echo": args}


@dataclass(kw_only=True, slots=True)
class CoordinationGateway(InMemoryToolGateway):
    """InMemoryToolGateway plus the coordination tools, resolved like ToolPool does."""

    async def resolve(
        self, *, project_id: str, patterns: Sequence[str], depth: int
    ) -> list[ResolvedTool]:
        specs = [
            catalog.ToolSpec(
                name=n, description=n, parameters={"type": "object"}, source_kind="builtin"
            )
            for n in self.tools
        ]
        chosen = catalog.resolve([*specs, *catalog.COORDINATION_TOOLS], patterns, depth)
        return [
            ResolvedTool(
                name=t.name,
                description=t.description,
                parameters=t.parameters,
                source=t.source_label,
                executed_by_executor=t.executed_by_executor,
            )
            for t in chosen
        ]


@dataclass(kw_only=True, slots=True)
class Executor:
    pool: asyncpg.Pool
    stub: GeminiStub
    queue: RunQueue
    definitions: DefinitionRepository
    gateway: CoordinationGateway = field(
        default_factory=lambda: CoordinationGateway(tools={"echo": _echo})
    )

    async def define(self, name: str, **fields: Any) -> AgentDefinition:
        fields.setdefault("system_prompt", f"You are {name}.")
        fields.setdefault("model", ModelConfig(name="gemini-test"))
        stored = await self.definitions.upsert(PROJECT, AgentDefinition(name=name, **fields))
        return stored.definition

    async def start(self, agent: str, text: str = "go", **params: Any) -> RunRecord:
        run, _ = await self.queue.enqueue(
            StartRunParams(
                project_id=PROJECT, agent_name=agent, agent_definition_id=None, input=text, **params
            )
        )
        return run

    async def wait(
        self,
        run_id: str,
        statuses: Sequence[str] = ("completed", "failed", "cancelled", "paused"),
        timeout_s: float = 15.0,
    ) -> RunRecord:
        """The run once it is in one of ``statuses`` (a database condition, deadline bound)."""

        async def ended() -> RunRecord | None:
            run = await self.queue.get(PROJECT, run_id)
            return run if run.status in statuses else None

        return await wait_for(
            ended, f"run {run_id} to be {'/'.join(statuses)}", timeout_s=timeout_s
        )

    async def wait_until(self, query: str, *args: Any, timeout_s: float = 15.0) -> None:
        """Polls ``query`` until it returns true (a database condition, deadline bound)."""
        await wait_for_query(self.pool, query, *args, timeout_s=timeout_s)

    async def children(self, run_id: str) -> list[RunRecord]:
        rows = await self.pool.fetch(
            "SELECT * FROM kb.agent_runs WHERE parent_run_id = $1 ORDER BY created_at, id", run_id
        )
        return [RunRecord.from_row(r) for r in rows]

    async def events(self, run_id: str) -> list[events.RunEvent]:
        stored = await events.read_events(
            self.pool, project_id=PROJECT, run_id=run_id, include_internal=True
        )
        return [e.event for e in stored]

    async def tool_calls(self, run_id: str) -> list[asyncpg.Record]:
        return await self.pool.fetch(
            "SELECT * FROM kb.agent_run_tool_calls WHERE run_id = $1 ORDER BY created_at, id",
            run_id,
        )


@contextlib.asynccontextmanager
async def running_executor(
    pool: asyncpg.Pool,
    database_url: str,
    stub: GeminiStub,
    *,
    workers: int = 1,
    definitions: DefinitionRepository | None = None,
) -> AsyncIterator[Executor]:
    """``workers`` RunWorkers on the database until the block ends; ``definitions``: the
    repository they read (a test's subclass that races a delete), else the real one."""
    queue = RunQueue(pool)
    definitions = definitions or DefinitionRepository(pool)
    executor = Executor(pool=pool, stub=stub, queue=queue, definitions=definitions)
    listeners = [Listener(database_url) for _ in range(workers)]
    models = [model_client_for(stub) for _ in range(workers)]
    stopping = asyncio.Event()
    try:
        async with asyncio.TaskGroup() as group:
            for index, (listener, model) in enumerate(zip(listeners, models, strict=True)):
                await listener.start()
                watch = RunWatch(pool=pool, listener=listener)
                await watch.start()
                children = ChildRuns(pool=pool, queue=queue, definitions=definitions, watch=watch)
                loop = AgentLoop(
                    pool=pool,
                    definitions=definitions,
                    tools=executor.gateway,
                    model=model,
                    owner=f"test-worker-{index}",
                    timeout_grace_s=2.0,
                    coordinator=Coordinator(pool=pool, definitions=definitions, children=children),
                    flows=FlowRunner(pool=pool, children=children),
                )
                worker = RunWorker(
                    queue=queue,
                    executor=loop,
                    listener=listener,
                    owner=f"test-worker-{index}",
                    poll_s=0.2,
                    heartbeat_s=0.5,
                    drain_s=0.5,
                )
                group.create_task(worker.run(stopping))
            try:
                yield executor
            finally:
                stopping.set()
    finally:
        for listener in listeners:
            await listener.close()
        for model in models:
            await model.aclose()
