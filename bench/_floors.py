"""The physical floors printed beside each figure: what a step can get no faster than on
this machine. A bare HTTP round trip to the stub model (the model call's floor), a bare
gRPC unary echo in another process (an agentfleet hop's floor) and one committed INSERT
(a durable step's floor, on the server being measured)."""

from __future__ import annotations

import asyncio
import secrets
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import grpc

sys.path.insert(0, str(Path(__file__).parent / "peers"))
from _common import percentile
from _procstat import cpu_seconds
from _stubctl import answer, install_scripts

from agentfleet.postgres import db
from agentfleet.testing.services import free_port

ECHO_METHOD = "/bench.Echo/Echo"
TOOLPOOL_BENCH = Path(__file__).parent / "toolpool_calltool.py"


async def _timed(call: Callable[[], Awaitable[object]], n: int, warmup: int) -> dict[str, Any]:
    for _ in range(warmup):
        await call()
    samples = []
    for _ in range(n):
        began = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - began)
    return {
        "p50_ms": percentile(samples, 50) * 1000,
        "p99_ms": percentile(samples, 99) * 1000,
        "n": n,
        "warmup": warmup,
    }


async def http_floor(stub_url: str, n: int, warmup: int) -> dict[str, Any]:
    await asyncio.to_thread(install_scripts, [answer("[floor]")], stub_url)
    body = {
        "contents": [{"role": "user", "parts": [{"text": "go"}]}],
        "systemInstruction": {"parts": [{"text": "[floor]"}]},
    }
    target = f"{stub_url}/v1beta/models/gemini-2.5-flash:generateContent"
    async with aiohttp.ClientSession() as session:

        async def call() -> None:
            async with session.post(target, json=body, headers={"x-goog-api-key": "b"}) as r:
                r.raise_for_status()
                await r.read()

        figures = await _timed(call, n, warmup)
    return {**figures, "span": "POST generateContent to the stub and read its answer (aiohttp)"}


@asynccontextmanager
async def _echo_server() -> AsyncIterator[tuple[int, Callable[[], Awaitable[object]]]]:
    """A bare grpc.aio echo server in another process: its pid and one unary call of 64
    bytes to it, on a connected channel."""
    port = free_port()
    server = await asyncio.create_subprocess_exec(
        sys.executable, str(TOOLPOOL_BENCH), "--echo-server", str(port)
    )
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            await asyncio.wait_for(channel.channel_ready(), timeout=30)
            echo = channel.unary_unary(ECHO_METHOD)
            yield server.pid, lambda: echo(b"x" * 64)
    finally:
        server.terminate()
        await server.wait()


async def grpc_floor(n: int, warmup: int) -> dict[str, Any]:
    async with _echo_server() as (_, call):
        figures = await _timed(call, n, warmup)
    return {**figures, "span": "unary call of 64 bytes to a bare grpc.aio server process"}


async def grpc_server_cpu(n: int, in_flight: int) -> dict[str, Any]:
    """CPU a bare grpc.aio server process spends per unary echo of 64 bytes, ``in_flight``
    calls at once on one channel: what any gRPC service costs per call here before it does
    anything (the floor of an executor's CPU per TriggerRun)."""
    async with _echo_server() as (pid, call):
        slots = asyncio.Semaphore(in_flight)

        async def one() -> None:
            async with slots:
                await call()

        await asyncio.gather(*(one() for _ in range(n // 10)))  # warm-up
        before = cpu_seconds(pid)
        await asyncio.gather(*(one() for _ in range(n)))
        used = cpu_seconds(pid) - before
    return {"server_cpu_ms_per_call": used * 1000 / n, "n": n, "in_flight": in_flight}


async def commit_floor(server_url: str, n: int, warmup: int) -> dict[str, Any]:
    admin = await db.connect(server_url)
    name = f"floor_{secrets.token_hex(4)}"
    await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        conn = await db.connect(db.replace_database(server_url, name))
        try:
            await conn.execute("CREATE TABLE floor (n int)")
            figures = await _timed(lambda: conn.execute("INSERT INTO floor VALUES (1)"), n, warmup)
        finally:
            await conn.close()
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()
    return {**figures, "span": "one autocommitted INSERT of one row (asyncpg)"}


async def measure_floors(server_url: str, stub_url: str, n: int, warmup: int) -> dict[str, Any]:
    return {
        "HTTP round trip to the stub": await http_floor(stub_url, n, warmup),
        "gRPC echo": await grpc_floor(n, warmup),
        "one commit": await commit_floor(server_url, n, warmup),
    }


def floor_lines(floors: dict[str, dict[str, Any]], server: str) -> list[str]:
    """One row per floor, for RESULTS beside the figures measured on the same server."""
    lines = [
        f"Floors on this machine ({server}): no step can be faster than these.",
        "",
        "| floor | p50 ms | p99 ms | n | warm-up | timed span |",
        "|---|---|---|---|---|---|",
    ]
    for name, f in floors.items():
        lines.append(
            f"| {name} | {f['p50_ms']:.3f} | {f['p99_ms']:.3f} | {f['n']} | {f['warmup']} "
            f"| {f['span']} |"
        )
    return [*lines, ""]


def floor_headline(floors: dict[str, dict[str, Any]], server: str) -> str:
    parts = [f"{name} p50 {f['p50_ms']:.3f} ms" for name, f in floors.items()]
    return f"floors ({server}): " + ", ".join(parts)
