"""A recorder write outlives the cancellation of the run that made it -- every one of them:
the worker's cancel NOTIFY and then its heartbeat can both name the same request (the soak
once ended a run cancelled while its TOOL_REQUEST commit was still in flight, leaving the
call open)."""

from __future__ import annotations

import asyncio

import pytest

from services.executor.store.persistence import complete_then_cancel


async def _yield_to_loop(times: int = 5) -> None:
    # Lets already-scheduled callbacks run (deterministic: no clock involved).
    for _ in range(times):
        await asyncio.sleep(0)


@pytest.mark.parametrize("cancels", [1, 2, 3])
async def test_the_write_finishes_before_any_number_of_cancellations_get_through(
    cancels: int,
) -> None:
    began = asyncio.Event()
    release = asyncio.Event()
    written: list[str] = []

    async def write() -> str:
        began.set()
        await release.wait()
        written.append("reply")
        return "reply"

    caller = asyncio.create_task(complete_then_cancel(write()))
    await began.wait()
    for _ in range(cancels):
        caller.cancel()
        await _yield_to_loop()
        assert not caller.done(), "a cancellation got through while the write was in flight"
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert written == ["reply"]


async def test_without_cancellation_the_write_result_is_returned() -> None:
    async def write() -> int:
        await asyncio.sleep(0)
        return 7

    assert await complete_then_cancel(write()) == 7
