"""ListRuns latency at 1,000,000 runs: keyset pages through the history gRPC server vs OFFSET.

Loads 1,000,000 runs with COPY into a fresh database (an embedded PostgreSQL in a temporary
folder, or a new database on the server of DATABASE_URL when set, dropped at the end), starts
the history server in-process, and prints p50/p99 latency of:

- ListRuns, first page (page_size 50), through gRPC with a project token;
- ListRuns 10,000 pages deep, with the token encode_page_token makes for that position;
- the same two pages by plain SQL with OFFSET 0 and OFFSET 500,000, for contrast.

Run: ``.venv/bin/python bench/history_pagination.py`` (about a minute or two on 2 cores).
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).parent))

import asyncio
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta

from _common import bench_database

from agentfleet.auth import TokenStore
from agentfleet.config import load_settings
from agentfleet.postgres import db
from agentfleet.postgres.pagination import encode_page_token
from agentfleet.process.service_runtime import start_service
from agentfleet.rpc.clients import open_channel
from agentfleet.v1 import history_pb2, history_pb2_grpc
from services.history.models import RunFilters
from services.history.server import build

RUNS = 1_000_000
PROJECT = "bench"
PAGE_SIZE = 50
DEEP_PAGES = 10_000
AGENTS = ("researcher", "writer", "reviewer", "planner", "plumber")
COLUMNS = (
    "id",
    "project_id",
    "agent_name",
    "status",
    "input",
    "root_run_id",
    "step_count",
    "total_steps",
    "tokens_in",
    "tokens_out",
    "created_at",
    "started_at",
    "completed_at",
    "duration_ms",
)


def run_records() -> Iterator[tuple[object, ...]]:
    """Top-level completed runs, one every 50 ms going back in time; 10% in another project."""
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for i in range(RUNS):
        run_id = uuid.uuid4()
        created = start + timedelta(milliseconds=50 * i)
        yield (
            run_id,
            "other" if i % 10 == 0 else PROJECT,
            AGENTS[i % len(AGENTS)],
            "completed",
            f"task number {i}",
            run_id,
            3,
            3,
            1200,
            300,
            created,
            created,
            created + timedelta(seconds=2),
            2000,
        )


async def load(url: str) -> None:
    conn = await db.connect(url)
    try:
        for name in AGENTS:
            await conn.execute(
                "INSERT INTO kb.agent_definitions (project_id, name, visibility) "
                "VALUES ($1, $2, $3)",
                PROJECT,
                name,
                "internal" if name == "plumber" else "project",
            )
        began = time.perf_counter()
        await conn.copy_records_to_table(
            "agent_runs", schema_name="kb", columns=COLUMNS, records=run_records()
        )
        await conn.execute("ANALYZE kb.agent_runs")
        print(f"loaded {RUNS:,} runs with COPY in {time.perf_counter() - began:.1f} s")
    finally:
        await conn.close()


async def timed(label: str, call: Callable[[], Awaitable[object]], n: int) -> None:
    for _ in range(5):  # warm caches and prepared statements
        await call()
    samples = []
    for _ in range(n):
        began = time.perf_counter()
        await call()
        samples.append((time.perf_counter() - began) * 1000)
    samples.sort()
    p50 = statistics.median(samples)
    p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
    print(f"{label:<48} p50 {p50:8.2f} ms   p99 {p99:8.2f} ms   (n={n})")


async def measure(url: str) -> None:
    settings = load_settings({"DATABASE_URL": url, "AGENTFLEET_LOG_LEVEL": "warning"})
    pool = await db.create_pool(url, min_size=2, max_size=4)
    service = await start_service(
        "history", build, settings=settings, pool=pool, database_url=url, port=0
    )
    token = (await TokenStore(pool).create(project_id=PROJECT, role="member")).token
    channel = open_channel(f"127.0.0.1:{service.port}", token=token)
    try:
        history = history_pb2_grpc.HistoryServiceStub(channel)
        offset = PAGE_SIZE * DEEP_PAGES
        position = await pool.fetchrow(
            "SELECT created_at, id FROM kb.agent_runs WHERE project_id = $1 "
            "ORDER BY created_at DESC, id DESC OFFSET $2 LIMIT 1",
            PROJECT,
            offset - 1,
        )
        deep_token = encode_page_token(
            [position["created_at"], str(position["id"])],
            RunFilters(project_id=PROJECT).digest_fields(),
        )

        async def page(token: str) -> None:
            response = await history.ListRuns(
                history_pb2.ListRunsRequest(
                    project_id=PROJECT, page_size=PAGE_SIZE, page_token=token
                )
            )
            assert len(response.runs) == PAGE_SIZE

        sql = (
            "SELECT id, agent_name, status, left(input, 200), created_at FROM kb.agent_runs "
            "WHERE project_id = $1 ORDER BY created_at DESC, id DESC OFFSET $2 LIMIT $3"
        )

        async def offset_page(skip: int) -> None:
            rows = await pool.fetch(sql, PROJECT, skip, PAGE_SIZE)
            assert len(rows) == PAGE_SIZE

        await timed("ListRuns keyset, first page (gRPC)", lambda: page(""), 300)
        await timed(
            f"ListRuns keyset, {DEEP_PAGES:,} pages deep (gRPC)", lambda: page(deep_token), 300
        )
        await timed("OFFSET 0, first page (SQL only)", lambda: offset_page(0), 300)
        await timed(f"OFFSET {offset:,} (SQL only)", lambda: offset_page(offset), 20)
    finally:
        await channel.close()
        await service.stop(grace_s=1.0)
        await pool.close()


async def main() -> None:
    async with bench_database() as url:
        await load(url)
        await measure(url)


if __name__ == "__main__":
    asyncio.run(main())
