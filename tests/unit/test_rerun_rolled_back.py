"""The bound of :func:`agentfleet.reconnect.rerun_rolled_back`: a write the server rolled back
runs again up to ``retries`` times, then its error goes through; other errors at once."""

from __future__ import annotations

import asyncpg
import pytest

from agentfleet.reconnect import ROLLBACK_RETRIES, rerun_rolled_back


class RolledBack:
    """A write the server rolls back its first ``times`` attempts."""

    def __init__(self, times: int, error: type[Exception] = asyncpg.DeadlockDetectedError):
        self.times = times
        self.error = error
        self.attempts = 0

    async def __call__(self) -> str:
        self.attempts += 1
        if self.attempts <= self.times:
            raise self.error("deadlock detected")
        return "stored"


async def test_a_rolled_back_write_runs_again_until_it_goes_through() -> None:
    write = RolledBack(ROLLBACK_RETRIES)
    assert await rerun_rolled_back(write) == "stored"
    assert write.attempts == ROLLBACK_RETRIES + 1


async def test_past_its_retries_the_rollback_goes_through() -> None:
    write = RolledBack(3, asyncpg.SerializationError)
    with pytest.raises(asyncpg.SerializationError):
        await rerun_rolled_back(write, retries=2)
    assert write.attempts == 3


async def test_any_other_error_goes_through_at_once() -> None:
    write = RolledBack(1, asyncpg.UniqueViolationError)
    with pytest.raises(asyncpg.UniqueViolationError):
        await rerun_rolled_back(write)
    assert write.attempts == 1
