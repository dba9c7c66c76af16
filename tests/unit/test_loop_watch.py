"""The loop watch names what held the loop: the registered task the loop was running when
its thread looked, or (a holder it cannot see) what was in flight meanwhile; a loop that was
not held past the threshold gives no warning."""

from __future__ import annotations

import asyncio
import time

from structlog.testing import capture_logs

from agentfleet.observability.loop_watch import LoopWatch, doing


async def _watched(work: asyncio.Future[None] | asyncio.Task[None]) -> list[dict[str, object]]:
    stopping = asyncio.Event()
    with capture_logs() as logs:
        watch = asyncio.create_task(LoopWatch(warn_s=0.3, tick_s=0.05).run(stopping))
        await asyncio.sleep(0)
        await work  # the watch's first wait began before it (tasks start in order)
        stopping.set()  # its last tick measures the stall
        await watch
    return [log for log in logs if log["event"] == "event loop held"]


async def test_the_registered_task_holding_the_loop_is_named() -> None:
    async def heavy() -> None:
        with doing("rpc /x.Y/Heavy project p"):
            await asyncio.sleep(0)
            _hold(0.6)  # Python work on the loop: the thread still gets the GIL

    async def light() -> None:
        with doing("rpc /x.Y/Light project q"):
            await asyncio.sleep(1.0)

    bystander = asyncio.create_task(light())
    (warning,) = await _watched(asyncio.create_task(heavy()))
    bystander.cancel()
    assert warning["held_by"] == "rpc /x.Y/Heavy project p"
    assert float(warning["lag_s"]) >= 0.5  # type: ignore[arg-type]
    assert set(warning["in_flight"]) == {  # type: ignore[arg-type]
        "rpc /x.Y/Heavy project p",
        "rpc /x.Y/Light project q",
    }


async def test_an_unregistered_holder_leaves_only_what_was_in_flight() -> None:
    async def heavy() -> None:
        with doing("run r1 project p"):
            await asyncio.sleep(0)
            await asyncio.create_task(_block())  # a child task: not registered itself

    (warning,) = await _watched(asyncio.create_task(heavy()))
    assert warning["held_by"] is None
    assert warning["in_flight"] == ["run r1 project p"]


async def test_no_warning_below_the_threshold() -> None:
    async def short() -> None:
        with doing("rpc /x.Y/Short"):
            _hold(0.1)

    assert await _watched(asyncio.create_task(short())) == []


async def _block() -> None:
    _hold(0.6)


def _hold(seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        pass
