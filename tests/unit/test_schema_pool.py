"""The schema pool (:mod:`agentfleet.bounded.schema_pool`): checks run in worker processes, a
runaway is killed at the time limit and its worker replaced, cheap checks stay inline."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from agentfleet.bounded.schema_pool import SchemaCheckTimeout, SchemaPool, is_cheap
from agentfleet.testing.waiting import wait_for

DOUBLING_PER_LEVEL = {
    "$defs": {
        "node": {
            "type": "object",
            "properties": {"x": {"allOf": [{"$ref": "#/$defs/node"}, {"$ref": "#/$defs/node"}]}},
        }
    },
    "$ref": "#/$defs/node",
}


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"x": value}
    return value


def test_only_what_the_bounds_prove_cheap_is_inline() -> None:
    small = {"type": "object", "properties": {"a": {"type": "string"}}}
    assert is_cheap(small, {"a": "b"})
    assert not is_cheap(small, {"a": "b" * 1_000_000})  # string length counts
    assert not is_cheap(DOUBLING_PER_LEVEL, nested(2))  # recursion: its cost is the value's


async def test_a_runaway_check_is_killed_and_the_next_one_is_served() -> None:
    pool = SchemaPool(workers=1, timeout_s=1.0)
    try:
        with pytest.raises(SchemaCheckTimeout, match="longer than 1 s"):
            await pool.check(DOUBLING_PER_LEVEL, nested(30))
        verdict = await pool.check(DOUBLING_PER_LEVEL, {"x": {"x": 1}})
        assert not verdict.ok
        assert verdict.problems[0].keyword == "type"
        assert verdict.problems[0].path == ("x", "x")
    finally:
        await pool.aclose()


async def test_errors_come_back_capped_with_a_count() -> None:
    pool = SchemaPool(workers=1)
    try:
        schema = {"type": "array", "uniqueItems": True, "items": {"type": "string"}}
        verdict = await pool.check(schema, list(range(5000)))
        assert len(verdict.problems) == 20
        assert verdict.more_text == "and 4,980 more"
        broken = await pool.check({"$ref": "#/$defs/missing"}, list(range(5000)))
        assert broken.schema_error is not None
        assert "resolves to nothing" in broken.schema_error
    finally:
        await pool.aclose()


SERVICE = """
import asyncio, os
from agentfleet.bounded.schema_pool import SchemaPool

async def main():
    pool = SchemaPool(workers=1)
    print(await pool.run(os.getpid), flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


def _gone(pid: int) -> bool:
    """No such process, or one that exited and waits for its reaper (a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in {"Z", "X"}


async def test_workers_exit_when_their_service_is_killed_outright() -> None:
    """A service killed with SIGKILL never closes its pool: its workers must not outlive it."""
    service = await asyncio.create_subprocess_exec(
        sys.executable, "-c", SERVICE, stdout=asyncio.subprocess.PIPE
    )
    assert service.stdout is not None
    worker = int(await asyncio.wait_for(service.stdout.readline(), 60))
    try:
        assert not _gone(worker)
        service.kill()
        await service.wait()
        await wait_for(lambda: _gone(worker), "the orphaned worker exits", timeout_s=15)
    finally:
        if not _gone(worker):
            os.kill(worker, signal.SIGKILL)
