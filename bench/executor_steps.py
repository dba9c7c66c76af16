"""Per-step framework overhead of the agent loop.

The stub Gemini server answers at once (one tool call per step, then a final answer); each
step runs one tool through an in-memory ToolGateway (the ToolPool gRPC hop is not included:
add about one loopback gRPC call per step for a built-in tool). Measured:

- one run of 200 steps: p50/p99 of the whole step, and of the step minus the model call
  (the stub's HTTP round trip), which is what the executor itself costs;
- 50 concurrent runs of 20 steps on one executor: steps per second.

Runs on a fresh database (embedded PostgreSQL in a temporary folder, or a new database on the
server of DATABASE_URL, dropped at the end). ``python bench/executor_steps.py``
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).parent))

import asyncio
import os
import statistics
import time
from typing import Any

from _common import bench_database

from agentfleet import db
from agentfleet.gemini_stub import Call, GeminiStub, Reply, Script
from agentfleet.gemini_stub.request import StubRequest
from agentfleet.llm import ModelReply
from agentfleet.testing.gemini import model_client_for
from services.executor.definitions import AgentDefinition, DefinitionRepository, ModelConfig
from services.executor.loop import AgentLoop, RunControl, StepBoundary, StopRun
from services.executor.queue import RunQueue
from services.executor.runs import StartRunParams
from services.executor.tool_gateway import InMemoryToolGateway

PROJECT = "bench"
OWNER = "bench-worker"


def scripted(steps: int) -> Script:
    def policy(request: StubRequest) -> Reply:
        if request.turn >= steps - 1:
            return Reply(text="done")
        # A different argument each step: identical repeats would trip the doom-loop guard.
        return Reply(calls=[Call("echo", {"text": f"step {request.turn}"})])

    return Script(name="bench", policy=policy)


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


async def measure(url: str) -> None:
    pool = await db.create_pool(url, min_size=4, max_size=20)
    stub = GeminiStub()
    await stub.start()
    model = TimedModel(model_client_for(stub))
    try:
        await DefinitionRepository(pool).upsert(
            PROJECT,
            AgentDefinition(name="bench", model=ModelConfig(name="stub"), tools=["echo"]),
        )
        queue = RunQueue(pool)
        gateway = InMemoryToolGateway(tools={"echo": _echo})

        async def one_run(steps: int, clock: StepClock | None) -> None:
            await queue.enqueue(
                StartRunParams(
                    project_id=PROJECT, agent_name="bench", agent_definition_id=None, input="go"
                )
            )
            (run,) = await queue.claim_next(OWNER, 60.0)
            loop = AgentLoop(
                pool=pool,
                definitions=DefinitionRepository(pool),
                tools=gateway,
                model=model,  # type: ignore[arg-type]
                owner=OWNER,
                step_hooks=[clock] if clock else [],
            )
            finished = await loop.execute(run, RunControl())
            assert finished is not None, "run left running"
            assert finished.status == "completed", finished.error_message

        stub.add_script(scripted(200))
        clock = StepClock()
        await one_run(200, clock)
        # Boundaries mark the start of steps 1..200; a step with a tool is the gap between
        # two marks (the last step, the final answer, has no following mark).
        step_s = [b - a for a, b in zip(clock.marks, clock.marks[1:], strict=False)][5:]
        model_s = model.model_s[5 : 5 + len(step_s)]
        overhead = [s - m for s, m in zip(step_s, model_s, strict=True)]
        ms = 1000.0
        print(f"one run, {len(step_s)} steps measured (first 5 skipped as warm-up):")
        print(
            f"  whole step   p50 {pct(step_s, 0.5) * ms:.2f} ms   "
            f"p99 {pct(step_s, 0.99) * ms:.2f} ms"
        )
        print(
            f"  model call   p50 {pct(model_s, 0.5) * ms:.2f} ms   "
            f"p99 {pct(model_s, 0.99) * ms:.2f} ms  (stub HTTP round trip)"
        )
        print(
            f"  overhead     p50 {pct(overhead, 0.5) * ms:.2f} ms   "
            f"p99 {pct(overhead, 0.99) * ms:.2f} ms  (target p50 < 3 ms)"
        )

        stub.reset()
        stub.add_script(scripted(20))
        runs, steps = 50, 20
        began = time.perf_counter()
        await asyncio.gather(*(one_run(steps, None) for _ in range(runs)))
        elapsed = time.perf_counter() - began
        total = runs * steps
        print(
            f"{runs} concurrent runs x {steps} steps: {total} steps in {elapsed:.2f} s = "
            f"{total / elapsed:.0f} steps/s  (target > 300; cpus: {os.cpu_count()}, "
            "stub model in the same process)"
        )
        print(f"  mean of {statistics.mean(model.model_s) * ms:.2f} ms per model call overall")
    finally:
        await model.aclose()
        await stub.stop()
        await pool.close()


async def main() -> None:
    async with bench_database() as url:
        await measure(url)


if __name__ == "__main__":
    asyncio.run(main())
