"""What every benchmark needs: a fresh migrated database, and figures printed the same way."""

from __future__ import annotations

import os
import platform
import secrets
import shutil
import statistics
import tempfile
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

from agentfleet import db
from agentfleet.embedded_pg import EmbeddedPostgres
from agentfleet.migrate import migrate_up


@asynccontextmanager
async def bench_database(name: str = "bench") -> AsyncIterator[str]:
    """A migrated database: new on DATABASE_URL's server if set, else embedded and temporary."""
    shared = os.environ.get("DATABASE_URL")
    if shared:
        admin = await db.connect(shared)
        database = f"agentfleet_{name}_{secrets.token_hex(4)}"
        await admin.execute(f'CREATE DATABASE "{database}"')
        try:
            url = db.replace_database(shared, database)
            await migrate_up(url)
            yield url
        finally:
            await admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
            await admin.close()
        return
    folder = Path(tempfile.mkdtemp(prefix="agentfleet-bench-"))
    server = EmbeddedPostgres(folder / "pg", durable=False)
    try:
        url = await server.start(database=name)
        await migrate_up(url)
        yield url
    finally:
        server.stop(force=True)
        shutil.rmtree(folder, ignore_errors=True)


def percentile(samples: Sequence[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def report(label: str, samples_s: Sequence[float]) -> str:
    """One line: p50, p90, p99 and mean in milliseconds."""
    ms = [s * 1000 for s in samples_s]
    return (
        f"{label:<48} p50 {percentile(ms, 50):8.3f} ms   p90 {percentile(ms, 90):8.3f} ms   "
        f"p99 {percentile(ms, 99):8.3f} ms   mean {statistics.fmean(ms):8.3f} ms   (n={len(ms)})"
    )


def machine() -> str:
    cores = os.cpu_count()
    try:
        with open("/proc/meminfo") as meminfo:
            kib = int(meminfo.readline().split()[1])
        memory = f"{kib / 1024 / 1024:.0f} GiB"
    except (OSError, ValueError, IndexError):
        memory = "unknown memory"
    return f"{platform.machine()}, {cores} cores, {memory}, Python {platform.python_version()}"
