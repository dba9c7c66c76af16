"""Framework overhead of spawn_agents: spawning and joining 10 and 100 children.

Two in-process executor workers (concurrency 128 each) on a fresh database; the stub Gemini
server answers every call at once. The parent's one spawn_agents call inserts N queued
child runs in one transaction, the workers claim and run them (one model call each), and
the parent wakes on their NOTIFYs and joins them. Measured per fan-out: the spawn_agents
call from start to joined result (the tool call's duration), and the same per child.
Everything there is framework: queueing, claiming, persisting, the stub's HTTP round trip
per child, CHILD_RUN events and the join.

``python bench/spawn_fanout.py`` (embedded PostgreSQL unless DATABASE_URL is set)
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))

from agentfleet.gemini_stub import Call, GeminiStub, Reply, Script, StubRequest
from agentfleet.postgres import db
from agentfleet.postgres.db import Listener
from agentfleet.runs.run_watch import RunWatch
from agentfleet.testing.gemini import model_client_for
from bench._common import bench_database, machine, report
from services.executor.coordination.children import ChildRuns
from services.executor.coordination.coordination import Coordinator
from services.executor.queue import RunQueue
from services.executor.registry.definitions import (
    AgentDefinition,
    DefinitionRepository,
    ModelConfig,
)
from services.executor.run_path.loop import AgentLoop
from services.executor.runs import StartRunParams
from services.executor.tools.tool_gateway import InMemoryToolGateway, ResolvedTool
from services.executor.worker import RunWorker
from services.toolpool import catalog

PROJECT = "bench"
FANOUTS = ((10, 10), (100, 5))
"""(children per spawn, repetitions)."""


class SpawnGateway(InMemoryToolGateway):
    """Resolves the coordination tools the way ToolPool does; no other tools."""

    async def resolve(self, *, project_id, patterns, depth):  # type: ignore[no-untyped-def]
        return [
            ResolvedTool(
                name=t.name,
                description=t.description,
                parameters=t.parameters,
                source=t.source_label,
                executed_by_executor=True,
            )
            for t in catalog.resolve(catalog.COORDINATION_TOOLS, patterns, depth)
        ]


def parent_policy(request: StubRequest) -> Reply:
    if request.turn > 0:
        return Reply(text="joined")
    count = int(request.last_user_text() or "1")
    tasks = [{"agent_name": "child", "prompt": f"task {i}"} for i in range(count)]
    return Reply(calls=[Call("spawn_agents", {"tasks": tasks})])


async def main() -> None:
    async with bench_database("spawn") as url:
        pool = await db.create_pool(url, min_size=4, max_size=40)
        stub = GeminiStub()
        await stub.start()
        stub.add_script(Script(name="parent", match_system="You are parent.", policy=parent_policy))
        stub.add_script(Script(name="child", replies=[Reply(text="done")], per_conversation=True))
        definitions = DefinitionRepository(pool)
        for name, tools in (("parent", ["spawn_agents"]), ("child", [])):
            await definitions.upsert(
                PROJECT,
                AgentDefinition(
                    name=name,
                    system_prompt=f"You are {name}.",
                    model=ModelConfig(name="stub"),
                    tools=tools,
                ),
            )
        queue = RunQueue(pool)
        stopping = asyncio.Event()
        listeners = [Listener(url) for _ in range(2)]
        models = [model_client_for(stub) for _ in range(2)]
        try:
            async with asyncio.TaskGroup() as group:
                for index, (listener, model) in enumerate(zip(listeners, models, strict=True)):
                    await listener.start()
                    watch = RunWatch(pool=pool, listener=listener)
                    await watch.start()
                    children = ChildRuns(
                        pool=pool, queue=queue, definitions=definitions, watch=watch
                    )
                    loop = AgentLoop(
                        pool=pool,
                        definitions=definitions,
                        tools=SpawnGateway(),
                        model=model,
                        owner=f"bench-{index}",
                        coordinator=Coordinator(
                            pool=pool,
                            definitions=definitions,
                            children=children,
                            max_children_per_call=100,
                            max_runs_per_tree=1000,
                        ),
                    )
                    worker = RunWorker(
                        queue=queue,
                        executor=loop,
                        listener=listener,
                        owner=f"bench-{index}",
                        concurrency=128,
                    )
                    group.create_task(worker.run(stopping))
                try:
                    print(f"spawn_agents fan-out overhead on {machine()}")
                    for count, repetitions in FANOUTS:
                        await measure(pool, queue, count, repetitions)
                finally:
                    stopping.set()
        finally:
            for listener in listeners:
                await listener.close()
            for model in models:
                await model.aclose()
            await stub.stop()
            await pool.close()


async def measure(pool, queue: RunQueue, count: int, repetitions: int) -> None:  # type: ignore[no-untyped-def]
    spawn_s: list[float] = []
    per_child_s: list[float] = []
    for _ in range(repetitions + 1):  # the first round warms up and is not counted
        run, _ = await queue.enqueue(
            StartRunParams(
                project_id=PROJECT, agent_name="parent", agent_definition_id=None, input=str(count)
            )
        )
        deadline = time.monotonic() + 120
        while (await queue.get(PROJECT, run.id)).status in ("queued", "running"):
            assert time.monotonic() < deadline, "parent did not finish"
            await asyncio.sleep(0.01)
        row = await pool.fetchrow(
            "SELECT duration_ms, cardinality(child_run_ids) AS n FROM kb.agent_run_tool_calls "
            "WHERE run_id = $1 AND tool_name = 'spawn_agents'",
            run.id,
        )
        assert row["n"] == count, row
        spawn_s.append(row["duration_ms"] / 1000)
        per_child_s.append(row["duration_ms"] / 1000 / count)
    print(report(f"spawn+join {count} children (whole call)", spawn_s[1:]))
    print(report(f"spawn+join {count} children (per child)", per_child_s[1:]))


if __name__ == "__main__":
    asyncio.run(main())
