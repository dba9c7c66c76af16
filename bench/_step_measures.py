"""What executor_steps.py measures with: the model's share of a step, step boundaries,
quantiles, and CPU per step of the executor (this process) and of a toolpool process."""

from __future__ import annotations

import time
from typing import Any

from peers._procstat import cpu_seconds

from agentfleet.llm import ModelReply
from services.executor.run_path.loop import StepBoundary, StopRun


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


MS = 1000.0


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (seconds), in milliseconds."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * MS


class ProcessCpu:
    """CPU spent since it was made: this process's (the executor's: ``time.process_time``),
    and a toolpool process's when given (from /proc, in 10 ms ticks)."""

    def __init__(self, toolpool_pid: int | None) -> None:
        self._pid = toolpool_pid
        self._executor = time.process_time()
        self._toolpool = cpu_seconds(toolpool_pid) if toolpool_pid else 0.0

    def executor_ms(self, steps: int) -> float:
        """The executor's CPU per step so far, in ms."""
        return (time.process_time() - self._executor) / steps * MS

    def per_step(self, steps: int) -> str:
        executor = self.executor_ms(steps)
        text = f"{executor:.2f} ms per step (process time)"
        if self._pid:
            toolpool = (cpu_seconds(self._pid) - self._toolpool) / steps * MS
            text += f"; toolpool process {toolpool:.2f} ms, both {executor + toolpool:.2f} ms"
        return text
