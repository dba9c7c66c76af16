"""Dispatcher figures (issue 8).

1. Unblock latency on the real services (in-process executor, toolpool, history and
   dispatcher, auth on, stub Gemini answering at once): a chain of tasks; for each link, the
   time from the blocker's run completing (``agent_runs.completed_at``) to the dependent's
   run being created by TriggerRun, and to it being started by an executor worker.
2. Dispatcher overhead per task on a 10,000-task random DAG (and 2,500 for linearity), with
   an executor stand-in that completes each run the moment it is triggered (one INSERT of a
   completed run + the NOTIFY the real executor sends). What is left is the dispatcher's own
   work: claims, sessions, prompts, outcomes, unblocking.

``python bench/dispatch.py`` (fresh database: embedded, or a new one on DATABASE_URL).
``--part latency|overhead`` runs one part only; ``--sizes 500,2000`` changes the DAG sizes
(the default runs both parts at 2,500 and 10,000 tasks). Part 2 also counts the statements
the dispatcher sends per task (every round trip on its pool, BEGIN/COMMIT and the pool's
connection reset included), which timing noise on a shared machine cannot blur.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))

from agentfleet.gemini_stub import GeminiStub, Reply, Script
from agentfleet.postgres import db
from agentfleet.testing.checks.statements import StatementCounter
from agentfleet.testing.dispatch import InstantRuns
from agentfleet.testing.services import start_stack
from agentfleet.v1 import dispatcher_pb2 as pb
from agentfleet.v1 import dispatcher_pb2_grpc
from bench._common import bench_database, report
from services.dispatcher.graphs.dag import NewTask
from services.dispatcher.graphs.graph_writes import GraphStore
from services.dispatcher.loop import Dispatcher
from services.dispatcher.selector import Selector
from services.dispatcher.timing import LoopTiming
from services.executor.registry.definitions import (
    AgentDefinition,
    DefinitionRepository,
    ModelConfig,
)

PROJECT = "bench"
CHAIN = 60


async def unblock_latency(url: str) -> None:
    pool = await db.create_pool(url, min_size=2, max_size=20)
    stub = GeminiStub()
    await stub.start()
    stub.add_script(Script(name="ok", policy=lambda r: Reply(text="ok")))
    await DefinitionRepository(pool).upsert(
        PROJECT,
        AgentDefinition(name="w", system_prompt="w", model=ModelConfig(name="m"), is_default=True),
    )
    stack = await start_stack(
        database_url=url, pool=pool, environ={"AGENTFLEET_GEMINI_BASE_URL": stub.base_url or ""}
    )
    try:
        token = await stack.create_token(PROJECT)
        api = dispatcher_pb2_grpc.DispatcherServiceStub(stack.channel("dispatcher", token=token))
        tasks = [pb.TaskSpec(key=f"c{i}", title=f"link {i}") for i in range(CHAIN)]
        edges = [
            pb.TaskEdge(blocker_key=f"c{i}", blocked_key=f"c{i + 1}") for i in range(CHAIN - 1)
        ]
        created = await api.CreateTaskGraph(
            pb.CreateTaskGraphRequest(project_id=PROJECT, tasks=tasks, edges=edges)
        )
        async with asyncio.timeout(120):
            async for _ in api.WatchTaskGraph(
                pb.WatchTaskGraphRequest(project_id=PROJECT, task_graph_id=created.task_graph.id)
            ):
                pass
        rows = await pool.fetch(
            """
            SELECT t.properties ->> 'key' AS key, r.created_at, r.started_at, r.completed_at
            FROM kb.agent_runs r JOIN kb.graph_objects t ON t.id = r.task_id
            WHERE r.project_id = $1
            """,
            PROJECT,
        )
        by_key = {r["key"]: r for r in rows}
        created_lat, started_lat = [], []
        for i in range(CHAIN - 1):
            done = by_key[f"c{i}"]["completed_at"]
            nxt = by_key[f"c{i + 1}"]
            created_lat.append((nxt["created_at"] - done).total_seconds())
            started_lat.append((nxt["started_at"] - done).total_seconds())
        print(report("blocker completed -> dependent run created", created_lat))
        print(report("blocker completed -> dependent run started", started_lat))
    finally:
        await stack.close()
        await stub.stop()
        await pool.close()


async def overhead(url: str, n: int) -> float:
    pool = await db.create_pool(url, min_size=2, max_size=20)
    project = f"{PROJECT}-{n}"
    await DefinitionRepository(pool).upsert(
        project,
        AgentDefinition(name="w", system_prompt="w", model=ModelConfig(name="m"), is_default=True),
    )
    rng = random.Random(n)
    tasks = [NewTask(key=f"t{i}", title=f"task {i}") for i in range(n)]
    edges = [
        (f"t{i}", f"t{j}")
        for j in range(1, n)
        for i in rng.sample(range(max(0, j - 200), j), k=min(j, rng.randint(0, 2)))
    ]
    started = time.perf_counter()
    graph_id = await GraphStore(pool).create_graph(
        project,
        title="bench",
        tasks=tasks,
        edges=edges,
        max_parallel=0,
        labels={},
        request_id="",
        validate_only=False,
    )
    create_s = time.perf_counter() - started
    runs = InstantRuns(pool)
    counter = StatementCounter()
    dispatcher_pool = await counter.pool(url, min_size=2, max_size=20)
    dispatcher = Dispatcher(
        dispatcher_pool,
        dsn=url,
        runs=runs,
        selector=Selector(pool),
        slots=32,
        timing=LoopTiming(lease_s=30.0, poll_s=1.0),
    )
    stopping = asyncio.Event()
    started = time.perf_counter()
    loop = asyncio.create_task(dispatcher.run(stopping))
    while True:
        done = await pool.fetchval(
            "SELECT count(*) FROM kb.graph_objects WHERE project_id = $1 AND type = 'SpecTask' "
            "AND status = 'completed'",
            project,
        )
        if done == n:
            break
        await asyncio.sleep(0.1)
    elapsed = time.perf_counter() - started
    stopping.set()
    await loop
    await dispatcher_pool.close()
    await pool.close()
    per_task_ms = elapsed / n * 1000
    print(
        f"{n:>6}-task DAG ({len(edges)} edges, graph {graph_id[:8]}): create {create_s:.2f} s, "
        f"dispatch to completion {elapsed:.2f} s = {per_task_ms:.2f} ms/task "
        f"({runs.triggered} runs triggered, {counter.count / n:.1f} dispatcher statements/task)"
    )
    return per_task_ms


async def main(part: str, sizes: list[int]) -> None:
    async with bench_database("dispatch") as url:
        if part in ("all", "latency"):
            await unblock_latency(url)
        if part in ("all", "overhead"):
            per_task = [await overhead(url, n) for n in sizes]
            if len(sizes) == 2:
                print(
                    f"per-task overhead ratio {sizes[1]:,} vs {sizes[0]:,} tasks: "
                    f"{per_task[1] / per_task[0]:.2f} (1.0 = linear)"
                )


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("all", "latency", "overhead"), default="all")
    parser.add_argument(
        "--sizes",
        type=lambda text: [int(n) for n in text.split(",")],
        default=[2_500, 10_000],
        help="comma-separated DAG sizes for part 2",
    )
    return parser.parse_args()


if __name__ == "__main__":
    options = arguments()
    asyncio.run(main(options.part, options.sizes))
