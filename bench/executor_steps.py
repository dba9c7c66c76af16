"""Per-step framework overhead of the agent loop.

The stub Gemini server answers at once (one tool call per step, then a final answer). Each
part runs twice: with the tool in memory (an in-memory ToolGateway: the executor alone), and
with the built-in ``get_entity`` through a real ToolPool process over loopback gRPC (a
database read per call), as a deployed executor runs it. Measured:

- one run of 200 steps: p50/p99 of the whole step, and of the step minus the model call
  (the stub's HTTP round trip), which is what the executor itself costs;
- 50 concurrent runs of 20 steps on one executor: steps per second;
- database round trips per step (every statement a pooled connection sends, counted by an
  asyncpg query logger, so BEGIN and COMMIT count too; the pool releases connections as
  ``db.create_pool``'s does, without a reset query): a figure machine noise cannot move;
- the executor process's CPU time per step (``time.process_time``, both parts): less
  sensitive than wall time to what else the machine runs.

The stub model runs in a process of its own (``--stub-in-process`` puts it back in the
executor's process, as this bench did before), so its HTTP server does not share the
executor's event loop and the figures measure the executor.

Runs on a fresh database (embedded PostgreSQL in a temporary folder, or a new database on the
server of DATABASE_URL, dropped at the end).
``python bench/executor_steps.py [--stub-in-process]``
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import argparse
import asyncio
import contextlib
import os
import signal
import statistics
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import asyncpg
from _common import bench_database, scratch_folder

from agentfleet.auth import TokenStore
from agentfleet.clients import open_channel
from agentfleet.config import load_settings
from agentfleet.gemini_stub import Call, GeminiStub, Reply, Script
from agentfleet.gemini_stub.request import StubRequest
from agentfleet.llm import GenaiModelClient, ModelReply, RetryPolicy
from agentfleet.testing.services import start_process_stack
from agentfleet.testing.statements import StatementCounter
from services.executor.loop import AgentLoop, RunControl, StepBoundary, StopRun
from services.executor.queue import RunQueue
from services.executor.registry.definitions import AgentDefinition, DefinitionRepository
from services.executor.registry.model_config import ModelConfig
from services.executor.runs import StartRunParams
from services.executor.tool_gateway import GrpcToolGateway, InMemoryToolGateway, ToolGateway

PROJECT = "bench"
OWNER = "bench-worker"


STUB_READY = "bench stub at "
"""What the stub process prints, followed by its base URL, once it serves."""


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


async def serve_stub() -> None:
    """The stub's own process: serves until SIGTERM or SIGINT."""
    stub = bench_stub()
    base_url = await stub.start()
    print(f"{STUB_READY}{base_url}", flush=True)
    stopping = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stopping.set)
    try:
        await stopping.wait()
    finally:
        await stub.stop()


@contextlib.asynccontextmanager
async def stub_base_url(in_process: bool) -> AsyncIterator[str]:
    """The base URL of a started stub, in this process or in a child process."""
    if in_process:
        stub = bench_stub()
        try:
            yield await stub.start()
        finally:
            await stub.stop()
        return
    child = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--serve-stub", stdout=asyncio.subprocess.PIPE
    )
    try:
        assert child.stdout is not None
        # readline returns once the stub printed its URL, or b"" if it died first.
        line = (await asyncio.wait_for(child.stdout.readline(), timeout=60)).decode()
        if not line.startswith(STUB_READY):
            raise RuntimeError(f"the stub process did not start: {line!r}")
        yield line.removeprefix(STUB_READY).strip()
    finally:
        if child.returncode is None:
            child.terminate()
        await asyncio.wait_for(child.wait(), timeout=30)


class TimedModel:
    """Wraps the model client to subtract its time from each step."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.model_s: list[float] = []

    async def generate(self, **kwargs: Any) -> ModelReply:
        began = time.perf_counter()
        try:
            return await self.inner.generate(**kwargs)
        finally:
            self.model_s.append(time.perf_counter() - began)

    async def aclose(self) -> None:
        await self.inner.aclose()


class StepClock:
    """A step hook that timestamps every step boundary."""

    def __init__(self) -> None:
        self.marks: list[float] = []

    async def __call__(self, boundary: StepBoundary) -> StopRun | None:
        self.marks.append(time.perf_counter())
        return None


async def _echo(args: dict[str, Any]) -> dict[str, Any]:
    return {"text": args.get("text", "")}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def measure(url: str, base_url: str, *, stub_in_process: bool) -> None:
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
        part = Part(pool=pool, statements=statements, model=model, stub_where=where)
        await part.run(
            title="one run",
            gateway=InMemoryToolGateway(tools={"echo": _echo}),
            agent="bench",
            extra="",
        )
        async with toolpool_gateway(url, pool) as (gateway, ids):
            await part.run(
                title="one run with get_entity over ToolPool gRPC",
                gateway=gateway,
                agent="bench-builtin",
                extra=f" ids={','.join(ids)}",
            )
    finally:
        await model.aclose()
        await pool.close()


@contextlib.asynccontextmanager
async def toolpool_gateway(
    url: str, pool: asyncpg.Pool
) -> AsyncIterator[tuple[GrpcToolGateway, list[str]]]:
    """A ToolPool process on the bench database, a gateway to it (a service token, as the
    executor holds), and 16 entities for get_entity to read."""
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
            yield GrpcToolGateway(channel), ids
    finally:
        await stack.stop(grace_s=5.0)


@dataclass(kw_only=True)
class Part:
    """One measured configuration: a 200-step run, then 50 concurrent runs of 20 steps."""

    pool: asyncpg.Pool
    statements: StatementCounter
    model: TimedModel
    stub_where: str

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
        (run,) = await queue.claim_next(OWNER, 60.0)
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

    async def run(self, *, title: str, gateway: ToolGateway, agent: str, extra: str) -> None:
        clock = StepClock()
        self.model.model_s.clear()
        sent_before = self.statements.count
        cpu_before = time.process_time()
        await self.one_run(gateway, agent, 200, extra, clock)
        run_cpu = time.process_time() - cpu_before
        run_statements = self.statements.count - sent_before
        # Boundaries mark the start of steps 1..200; a step with a tool is the gap between
        # two marks (the last step, the final answer, has no following mark).
        step_s = [b - a for a, b in zip(clock.marks, clock.marks[1:], strict=False)][5:]
        model_s = self.model.model_s[5 : 5 + len(step_s)]
        overhead = [s - m for s, m in zip(step_s, model_s, strict=True)]
        ms = 1000.0
        print(f"{title}, {len(step_s)} steps measured (first 5 skipped as warm-up):")
        print(
            f"  whole step   p50 {pct(step_s, 0.5) * ms:.2f} ms   "
            f"p99 {pct(step_s, 0.99) * ms:.2f} ms"
        )
        print(
            f"  model call   p50 {pct(model_s, 0.5) * ms:.2f} ms   "
            f"p99 {pct(model_s, 0.99) * ms:.2f} ms   mean {statistics.mean(model_s) * ms:.2f} ms  "
            "(stub HTTP round trip)"
        )
        print(
            f"  overhead     p50 {pct(overhead, 0.5) * ms:.2f} ms   "
            f"p99 {pct(overhead, 0.99) * ms:.2f} ms  (target p50 < 3 ms)"
        )
        print(
            f"  database round trips: {run_statements} for the run of 200 steps = "
            f"{run_statements / 200:.2f} per step (claim, start, finish included)"
        )
        print(f"  executor CPU {run_cpu / 200 * ms:.2f} ms per step (process time)")
        runs, steps = 50, 20
        began = time.perf_counter()
        cpu_before = time.process_time()
        await asyncio.gather(
            *(self.one_run(gateway, agent, steps, extra, None) for _ in range(runs))
        )
        elapsed = time.perf_counter() - began
        concurrent_cpu = time.process_time() - cpu_before
        total = runs * steps
        print(
            f"{title}: {runs} concurrent runs x {steps} steps: {total} steps in "
            f"{elapsed:.2f} s = {total / elapsed:.0f} steps/s  (target > 300; cpus: "
            f"{os.cpu_count()}, stub model {self.stub_where})"
        )
        print(f"  executor CPU {concurrent_cpu / total * ms:.2f} ms per step (process time)")
        # Here a model call also waits for the event loop, busy with the other runs' steps.
        print(f"  mean of {statistics.mean(self.model.model_s) * ms:.2f} ms per model call overall")


async def main(stub_in_process: bool) -> None:
    async with bench_database() as url, stub_base_url(stub_in_process) as base_url:
        await measure(url, base_url, stub_in_process=stub_in_process)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--stub-in-process", action="store_true", help="run the stub model in this process"
    )
    parser.add_argument("--serve-stub", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_stub:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(serve_stub())
    else:
        asyncio.run(main(args.stub_in_process))
