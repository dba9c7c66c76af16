"""CallTool latency for a built-in tool over loopback gRPC.

Starts the toolpool as its own process (so the client's event loop does not share a core's
time slices with the server's in one process), creates a running run whose agent may call
``get_entity``, and times CallTool(get_entity) sequentially, then with 16 calls in flight.

Run: ``.venv/bin/python bench/toolpool_calltool.py``.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

from google.protobuf import struct_pb2

sys.path.insert(0, str(Path(__file__).parent))
from _common import bench_database, machine, report

from agentfleet import db
from agentfleet.auth import TokenStore
from agentfleet.clients import open_channel
from agentfleet.testing.services import start_process_stack
from agentfleet.v1 import toolpool_pb2, toolpool_pb2_grpc

PROJECT = "bench"
WARMUP = 200
CALLS = 3000
CONCURRENT = 16


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
        token = await TokenStore(pool).create(project_id=None, role="service")
        return run_id, entity, token.token
    finally:
        await pool.close()


async def main() -> None:
    async with bench_database("calltool") as url:
        run_id, entity, token = await prepare(url)
        logs = Path(tempfile.mkdtemp(prefix="agentfleet-bench-logs-"))
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

                for n in range(WARMUP):
                    await call(n)
                sequential = [await call(n) for n in range(CALLS)]
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
    print(report("CallTool get_entity, sequential", sequential))
    print(report(f"CallTool get_entity, {CONCURRENT} in flight", concurrent))
    print(
        f"{'throughput with ' + str(CONCURRENT) + ' in flight':<48} {CALLS / elapsed:8.0f} calls/s"
    )


if __name__ == "__main__":
    asyncio.run(main())
