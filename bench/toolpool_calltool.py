"""CallTool latency for a built-in tool over loopback gRPC.

Starts the toolpool as its own process (so the client's event loop does not share a core's
time slices with the server's in one process), creates a running run whose agent may call
``get_entity``, and times CallTool(get_entity) sequentially, then with 16 calls in flight.

The floor comes first: the same sequential calls to a bare ``grpc.aio`` unary echo server in
its own process (no interceptors, no database, no protobuf), once through a plain channel
and once through ``open_channel`` (the client stack CallTool uses). CallTool can get no
faster than that on this machine.

Run: ``.venv/bin/python bench/toolpool_calltool.py``.
"""

from __future__ import annotations

import asyncio
import itertools
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc
from google.protobuf import struct_pb2

sys.path.insert(0, str(Path(__file__).parent))
from _common import bench_database, machine, report, scratch_folder

from agentfleet.auth import TokenStore
from agentfleet.postgres import db
from agentfleet.rpc.clients import open_channel
from agentfleet.testing.services import free_port, start_process_stack
from agentfleet.v1 import toolpool_pb2, toolpool_pb2_grpc

PROJECT = "bench"
WARMUP = 200
CALLS = 3000
CONCURRENT = 16
ECHO_METHOD = "/bench.Echo/Echo"


def serve_echo(port: int) -> None:
    """The floor's server: a unary method that returns its request bytes."""

    async def echo(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return request

    async def serve() -> None:
        server = grpc.aio.server()
        handler = grpc.unary_unary_rpc_method_handler(echo)
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("bench.Echo", {"Echo": handler}),)
        )
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        await server.wait_for_termination()

    asyncio.run(serve())


async def sequential_calls(call: Callable[[], Awaitable[object]]) -> list[float]:
    """Seconds per call, one at a time, after a warm-up."""
    for _ in range(WARMUP):
        await call()
    samples = []
    for _ in range(CALLS):
        started = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - started)
    return samples


async def measure_floor(token: str) -> list[str]:
    """Report lines for the bare echo, through a plain channel and through open_channel."""
    port = free_port()
    server = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--echo-server", str(port)
    )
    try:
        lines = []
        channels = {
            "plain channel": grpc.aio.insecure_channel(f"127.0.0.1:{port}"),
            "open_channel": open_channel(f"127.0.0.1:{port}", token=token),
        }
        for name, channel in channels.items():
            async with channel:
                await asyncio.wait_for(channel.channel_ready(), timeout=30)
                echo = channel.unary_unary(ECHO_METHOD)
                samples = await sequential_calls(lambda echo=echo: echo(b"x" * 64))
                lines.append(report(f"floor: bare grpc.aio echo, {name}", samples))
        return lines
    finally:
        server.terminate()
        await server.wait()


async def prepare(url: str) -> tuple[str, str, str]:
    pool = await db.create_pool(url, min_size=1, max_size=2)
    try:
        definition = await pool.fetchval(
            "INSERT INTO kb.agent_definitions (project_id, name, tools) "
            "VALUES ($1, 'reader', '{get_entity}') RETURNING id",
            PROJECT,
        )
        run_id = await pool.fetchval(
            """INSERT INTO kb.agent_runs (project_id, agent_definition_id, agent_name, status,
                   input, lease_owner, lease_expires_at, started_at)
               VALUES ($1, $2, 'reader', 'running', 'bench', 'bench',
                       now() + interval '1 hour', now())
               RETURNING id::text""",
            PROJECT,
            definition,
        )
        entity = await pool.fetchval(
            "INSERT INTO kb.graph_objects (project_id, type, properties) "
            "VALUES ($1, 'Note', '{\"title\": \"benchmark\"}') RETURNING id::text",
            PROJECT,
        )
        token = await TokenStore(pool).create(project_id=None, role="service", service="executor")
        return run_id, entity, token.token
    finally:
        await pool.close()


async def main() -> None:
    async with bench_database("calltool") as url:
        run_id, entity, token = await prepare(url)
        floor = await measure_floor(token)
        logs = scratch_folder("agentfleet-bench-logs-")
        stack = await start_process_stack(
            database_url=url,
            log_dir=logs,
            names=("toolpool",),
            environ={"AGENTFLEET_SERVICE_TOKEN": token, "AGENTFLEET_LOG_LEVEL": "warning"},
        )
        try:
            async with open_channel(stack.addresses["toolpool"], token=token) as channel:
                stub = toolpool_pb2_grpc.ToolPoolServiceStub(channel)
                arguments = struct_pb2.Struct()
                arguments.update({"id": entity})

                async def call(n: int) -> float:
                    started = time.perf_counter()
                    reply = await stub.CallTool(
                        toolpool_pb2.CallToolRequest(
                            project_id=PROJECT,
                            run_id=run_id,
                            tool_call_id=f"c{n}",
                            tool_name="get_entity",
                            arguments=arguments,
                        )
                    )
                    assert not reply.is_error, reply.error_message
                    return time.perf_counter() - started

                numbers = itertools.count()
                sequential = await sequential_calls(lambda: call(next(numbers)))
                gate = asyncio.Semaphore(CONCURRENT)

                async def gated(n: int) -> float:
                    async with gate:
                        return await call(n)

                began = time.perf_counter()
                concurrent = await asyncio.gather(*(gated(n) for n in range(CALLS)))
                elapsed = time.perf_counter() - began
        finally:
            await stack.stop()
    print(f"machine: {machine()}")
    for line in floor:
        print(line)
    print(report("CallTool get_entity, sequential", sequential))
    print(report(f"CallTool get_entity, {CONCURRENT} in flight", concurrent))
    print(
        f"{'throughput with ' + str(CONCURRENT) + ' in flight':<48} {CALLS / elapsed:8.0f} calls/s"
    )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--echo-server"]:
        serve_echo(int(sys.argv[2]))
    else:
        asyncio.run(main())
