"""Per-step framework overhead of the agent loop.

The stub Gemini server answers at once (one tool call per step, then a final answer). The
parts (``--parts``, all by default): ``memory``, the tool in memory (an in-memory
ToolGateway: the executor alone); ``toolpool``, the built-in ``get_entity`` through a real
ToolPool process over loopback gRPC (a database read per call), as a deployed executor runs
it; ``inprocess``, the same tool run inside the executor by the toolpool's own code
(AGENTFLEET_EXECUTOR_BUILTIN_TOOLS=inprocess). The get_entity parts alternate ``--rounds``
times. Measured:

- ``--repeats`` runs of 200 steps (3 by default), their steps pooled: p50/p99 of the whole
  step, and of the step minus the model call (the stub's HTTP round trip), which is what the
  executor itself costs;
- 50 concurrent runs of 20 steps on one executor: steps per second;
- database round trips per step (every statement a pooled connection sends, counted by an
  asyncpg query logger, so BEGIN and COMMIT count too; the pool releases connections as
  ``db.create_pool``'s does, without a reset query): a figure machine noise cannot move;
  the RunEventNotifier's sends (the NOTIFY of the start and step writes, after they commit)
  are counted apart;
- the executor process's CPU time per step (``time.process_time``): less sensitive than
  wall time to what else the machine runs, yet a busy neighbour on a shared 2-core machine
  moves one run's figure by +-30%, so the 200-step runs print their median and range; with
  get_entity also the toolpool process's (from /proc), which the in-process part leaves
  idle.

Each part first runs a 3-step warm-up (the model client's first call builds its HTTP
session and SSL contexts, a gRPC channel connects: once per process, not per step), then
settles the heap as the executor service does after startup
(:func:`services.executor.server.settle_heap`).

The stub model runs in a process of its own (``--stub-in-process`` puts it back in the
executor's process, as this bench did before), so its HTTP server does not share the
executor's event loop and the figures measure the executor.

``--profile FILE`` runs cProfile over the first 200-step run (the in-memory tool), writes
its statistics to FILE (``python -m pstats FILE``) and prints the functions with the most
CPU of their own; the figures of that run then include the profiler's own cost.

Runs on a fresh database (embedded PostgreSQL in a temporary folder, or a new database on the
server of DATABASE_URL, dropped at the end).
``python bench/executor_steps.py [--parts memory,toolpool,inprocess] [--rounds N]
[--repeats N] [--stub-in-process] [--profile FILE]``
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import argparse
import asyncio
import contextlib
import cProfile
import os
import pstats
import statistics
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import asyncpg
import grpc
from _common import bench_database, scratch_folder
from _step_measures import MS, ProcessCpu, StepClock, TimedModel, pct
from _stub_child import serve, stub_child

from agentfleet.auth import TokenStore
from agentfleet.config import load_settings
from agentfleet.gemini_stub import Call, GeminiStub, Reply, Script
from agentfleet.gemini_stub.request import StubRequest
from agentfleet.llm import GenaiModelClient, RetryPolicy
from agentfleet.rpc.clients import open_channel
from agentfleet.testing.checks.statements import StatementCounter
from agentfleet.testing.services import start_process_stack
from services.executor.queue import RunQueue
from services.executor.registry.definitions import AgentDefinition, DefinitionRepository
from services.executor.registry.model_config import ModelConfig
from services.executor.run_path.loop import AgentLoop, RunControl
from services.executor.run_server import tool_gateway
from services.executor.runs import RunRecord, StartRunParams
from services.executor.server import settle_heap
from services.executor.tools.tool_gateway import InMemoryToolGateway, ToolGateway

PROJECT = "bench"
NOTIFY_SEND = "pg_notify(channel, payload)"
"""What the RunEventNotifier's statement holds (agentfleet.events.notifier)."""
OWNER = "bench-worker"


GET_ENTITY_PARTS = {
    "toolpool": "one run with get_entity over ToolPool gRPC",
    "inprocess": "one run with get_entity in the executor (BUILTIN_TOOLS=inprocess)",
}
"""The built-in get_entity where the executor runs it: the toolpool's process (the default),
or its own (AGENTFLEET_EXECUTOR_BUILTIN_TOOLS=inprocess), by part name."""
PARTS = frozenset({"memory", *GET_ENTITY_PARTS})
"""The configurations measured: the in-memory tool, then get_entity both ways."""


def scripted() -> Script:
    """Answers a run whose input is ``steps=N`` with N-1 tool steps, then a final answer
    (the step count travels in the conversation, so a stub in another process needs no
    other instruction)."""

    def policy(request: StubRequest) -> Reply:
        # "steps=N" (the echo tool) or "steps=N ids=a,b,..." (get_entity on those entities)
        first = request.contents[0]["parts"][0]["text"]
        fields = dict(item.split("=", 1) for item in first.split())
        if request.turn >= int(fields["steps"]) - 1:
            return Reply(text="done")
        # A different argument each step: identical repeats would trip the doom-loop guard.
        if "ids" in fields:
            ids = fields["ids"].split(",")
            return Reply(calls=[Call("get_entity", {"id": ids[request.turn % len(ids)]})])
        return Reply(calls=[Call("echo", {"text": f"step {request.turn}"})])

    return Script(name="bench", policy=policy)


def bench_stub() -> GeminiStub:
    """The stub this bench talks to. It keeps no record of the requests: the bench reads
    none, and 1,200 recorded conversations made the stub's full garbage collections pause
    for 100-250 ms, which showed up as the model call's mean and p99."""
    stub = GeminiStub(record_requests=False)
    stub.add_script(scripted())
    return stub


@contextlib.asynccontextmanager
async def stub_base_url(in_process: bool) -> AsyncIterator[str]:
    """The base URL of a started stub, in this process or in a child process."""
    if not in_process:
        async with stub_child(__file__) as base_url:
            yield base_url
        return
    stub = bench_stub()
    try:
        yield await stub.start()
    finally:
        await stub.stop()


async def _echo(args: dict[str, Any]) -> dict[str, Any]:
    return {"text": args.get("text", "")}


async def measure(
    url: str,
    base_url: str,
    *,
    stub_in_process: bool,
    profile: Path | None = None,
    parts: frozenset[str] = PARTS,
    rounds: int = 1,
    repeats: int = 1,
) -> None:
    statements = StatementCounter()
    pool = await statements.pool(url, min_size=4, max_size=20)
    settings = load_settings({}).with_overrides(
        gemini_base_url=base_url, gemini_api_key=None, gemini_use_vertex=False
    )
    model = TimedModel(GenaiModelClient.from_settings(settings, retry=RetryPolicy.for_tests()))
    where = "in the same process" if stub_in_process else "in its own process"
    try:
        repository = DefinitionRepository(pool)
        await repository.upsert(
            PROJECT, AgentDefinition(name="bench", model=ModelConfig(name="stub"), tools=["echo"])
        )
        await repository.upsert(
            PROJECT,
            AgentDefinition(
                name="bench-builtin", model=ModelConfig(name="stub"), tools=["get_entity"]
            ),
        )
        part = Part(
            pool=pool,
            statements=statements,
            model=model,
            stub_where=where,
            profile=profile,
            repeats=repeats,
        )
        if "memory" in parts:
            await part.run(
                title="one run",
                gateway=InMemoryToolGateway(tools={"echo": _echo}),
                agent="bench",
                extra="",
            )
        if not parts & {"toolpool", "inprocess"}:
            return
        async with toolpool_gateway(url, pool) as (channel, ids, toolpool_pid):
            # The get_entity parts alternate, so machine noise falls on both alike.
            for _ in range(rounds):
                for name, title in GET_ENTITY_PARTS.items():
                    if name in parts:
                        await part.run(
                            title=title,
                            gateway=tool_gateway(pool, channel, where=name),
                            agent="bench-builtin",
                            extra=f" ids={','.join(ids)}",
                            toolpool_pid=toolpool_pid,
                        )
    finally:
        await model.aclose()
        await pool.close()


@contextlib.asynccontextmanager
async def toolpool_gateway(
    url: str, pool: asyncpg.Pool
) -> AsyncIterator[tuple[grpc.aio.Channel, list[str], int]]:
    """A ToolPool process on the bench database, a channel to it (a service token, as the
    executor holds), 16 entities for get_entity to read, and the process id."""
    ids = [
        await pool.fetchval(
            "INSERT INTO kb.graph_objects (project_id, type, properties) "
            "VALUES ($1, 'Note', $2) RETURNING id::text",
            PROJECT,
            {"title": f"entity {i}"},
        )
        for i in range(16)
    ]
    service = (
        await TokenStore(pool).create(project_id=None, role="service", service="executor")
    ).token
    stack = await start_process_stack(
        database_url=url,
        log_dir=scratch_folder("agentfleet-bench-steps-"),
        names=("toolpool",),
        environ={"AGENTFLEET_SERVICE_TOKEN": service, "AGENTFLEET_LOG_LEVEL": "warning"},
    )
    try:
        async with open_channel(stack.addresses["toolpool"], token=service) as channel:
            yield channel, ids, stack.processes["toolpool"].pid
    finally:
        await stack.stop(grace_s=5.0)


async def claim_one(queue: RunQueue, within_s: float = 30.0) -> RunRecord:
    """A queued run, claimed. The claim prefers the oldest runs, so a claimer whose statement
    began before other runs were queued can find every run it saw taken by claimers that
    came later (read committed): it claims again, as a worker does on its next wake-up."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if claimed := await queue.claim_next(OWNER, 60.0):
            return claimed[0]
        await asyncio.sleep(0.001)
    raise RuntimeError(f"no queued run claimed within {within_s:g} s")


@dataclass(kw_only=True)
class Part:
    """One measured configuration: a 200-step run, then 50 concurrent runs of 20 steps."""

    pool: asyncpg.Pool
    statements: StatementCounter
    model: TimedModel
    stub_where: str
    profile: Path | None = None
    """Where to write the cProfile statistics of the next 200-step run (then None)."""
    repeats: int = 1
    """How many 200-step runs are measured: their steps pooled, their CPU per step the
    median."""

    async def one_run(
        self, gateway: ToolGateway, agent: str, steps: int, extra: str, clock: StepClock | None
    ) -> None:
        queue = RunQueue(self.pool)
        await queue.enqueue(
            StartRunParams(
                project_id=PROJECT,
                agent_name=agent,
                agent_definition_id=None,
                input=f"steps={steps}{extra}",
            )
        )
        run = await claim_one(queue)
        loop = AgentLoop(
            pool=self.pool,
            definitions=DefinitionRepository(self.pool),
            tools=gateway,
            model=self.model,  # type: ignore[arg-type]
            owner=OWNER,
            step_hooks=[clock] if clock else [],
        )
        finished = await loop.execute(run, RunControl())
        assert finished is not None, "run left running"
        assert finished.status == "completed", finished.error_message

    async def run(
        self,
        *,
        title: str,
        gateway: ToolGateway,
        agent: str,
        extra: str,
        toolpool_pid: int | None = None,
    ) -> None:
        await self.one_run(gateway, agent, 3, extra, None)  # warm-up: sessions, channels
        settle_heap()
        step_s: list[float] = []
        model_s: list[float] = []
        cpu_ms: list[float] = []
        cpu_text = ""
        for _ in range(self.repeats):
            clock = StepClock()
            self.model.model_s.clear()
            sent_before = self.statements.count
            cpu = ProcessCpu(toolpool_pid)
            with self._profiled():
                await self.one_run(gateway, agent, 200, extra, clock)
            cpu_ms.append(cpu.executor_ms(200))
            cpu_text = cpu.per_step(200)
            run_statements = self.statements.count - sent_before
            sends = sum(NOTIFY_SEND in s for s in self.statements.statements[sent_before:])
            # Boundaries mark the start of steps 1..200; a step with a tool is the gap
            # between two marks (the last step, the final answer, has no following mark).
            run_steps = [b - a for a, b in zip(clock.marks, clock.marks[1:], strict=False)][5:]
            step_s += run_steps
            model_s += self.model.model_s[5 : 5 + len(run_steps)]
        overhead = [s - m for s, m in zip(step_s, model_s, strict=True)]
        print(
            f"{title}, {len(step_s)} steps measured ({self.repeats} runs of 200 steps, the "
            "first 5 of each skipped as warm-up):"
        )
        print(f"  whole step   p50 {pct(step_s, 0.5):.2f} ms   p99 {pct(step_s, 0.99):.2f} ms")
        print(
            f"  model call   p50 {pct(model_s, 0.5):.2f} ms   p99 {pct(model_s, 0.99):.2f} ms   "
            f"mean {statistics.mean(model_s) * MS:.2f} ms  (stub HTTP round trip)"
        )
        print(
            f"  overhead     p50 {pct(overhead, 0.5):.2f} ms   "
            f"p99 {pct(overhead, 0.99):.2f} ms  (target p50 < 3 ms)"
        )
        print(
            f"  database round trips: {run_statements} for the run of 200 steps = "
            f"{run_statements / 200:.2f} per step (claim, start, finish included): "
            f"{(run_statements - sends) / 200:.2f} on the run's path, "
            f"{sends / 200:.2f} notification sends after its writes commit (off its path; a "
            "lone run's are not shared, many runs' share one)"
        )
        if self.repeats == 1:
            print(f"  executor CPU {cpu_text}")
        else:
            # The median: a busy neighbour on a shared machine moves single runs by +-30%.
            print(
                f"  executor CPU {statistics.median(cpu_ms):.2f} ms per step (process time; "
                f"median of {self.repeats} runs, {min(cpu_ms):.2f}-{max(cpu_ms):.2f}); last "
                f"run: {cpu_text}"
            )
        runs, steps = 50, 20
        began = time.perf_counter()
        cpu = ProcessCpu(toolpool_pid)
        await asyncio.gather(
            *(self.one_run(gateway, agent, steps, extra, None) for _ in range(runs))
        )
        elapsed = time.perf_counter() - began
        total = runs * steps
        print(
            f"{title}: {runs} concurrent runs x {steps} steps: {total} steps in "
            f"{elapsed:.2f} s = {total / elapsed:.0f} steps/s  (target > 300; cpus: "
            f"{os.cpu_count()}, stub model {self.stub_where})"
        )
        print(f"  executor CPU {cpu.per_step(total)}")
        # Here a model call also waits for the event loop, busy with the other runs' steps.
        print(f"  mean of {statistics.mean(self.model.model_s) * MS:.2f} ms per model call overall")

    @contextlib.contextmanager
    def _profiled(self) -> Iterator[None]:
        """cProfile over the block when ``profile`` is set (then unset: once)."""
        target, self.profile = self.profile, None
        if target is None:
            yield
            return
        # CPU time, not wall time: the machine may be busy with other work.
        profiler = cProfile.Profile(time.process_time)
        profiler.enable()
        try:
            yield
        finally:
            profiler.disable()
        profiler.dump_stats(target)
        print(f"profile of the next run written to {target}; by CPU of their own:")
        pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(40)


async def main(args: argparse.Namespace) -> None:
    async with bench_database() as url, stub_base_url(args.stub_in_process) as base_url:
        await measure(
            url,
            base_url,
            stub_in_process=args.stub_in_process,
            profile=args.profile,
            parts=args.parts,
            rounds=args.rounds,
            repeats=args.repeats,
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--stub-in-process", action="store_true", help="run the stub model in this process"
    )
    parser.add_argument("--profile", type=Path, help="cProfile the first run into this file")
    parser.add_argument(
        "--parts",
        default=",".join(sorted(PARTS)),
        help=f"comma-separated, of {', '.join(sorted(PARTS))} (default: all)",
    )
    parser.add_argument(
        "--rounds", type=int, default=1, help="how often the get_entity parts alternate"
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="200-step runs measured per part (steps pooled, CPU per step their median)",
    )
    parser.add_argument("--serve-stub", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_stub:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(serve(bench_stub()))
    else:
        args.parts = frozenset(args.parts.split(","))
        if not args.parts <= PARTS:
            parser.error(f"--parts: unknown {', '.join(sorted(args.parts - PARTS))}")
        asyncio.run(main(args))
