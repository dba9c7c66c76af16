"""What every benchmark needs: a fresh migrated database, and figures printed the same way.

Every temporary folder a benchmark makes comes from :func:`temporary_folder` (deleted when
its block ends) or :func:`scratch_folder` (deleted when the process ends), whichever way it
ends: normally, on an error, or on Ctrl-C. A benchmark stopped from
outside (run_all's time limit) is interrupted with :func:`interrupt`, so it gets that chance.
"""

from __future__ import annotations

import atexit
import os
import platform
import secrets
import shutil
import signal
import statistics
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

from agentfleet.postgres import db
from agentfleet.postgres.embedded_pg import EmbeddedPostgres
from agentfleet.postgres.migrate import migrate_up

if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    # Started from a shell's background job (`make bench &`), a process inherits Ctrl-C
    # ignored: the SIGINT that stops a benchmark (run_all's time limit, or the user's) would
    # then do nothing, and the kill after the grace would leave its folders behind.
    signal.signal(signal.SIGINT, signal.default_int_handler)


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
    with temporary_folder("agentfleet-bench-") as folder:
        server = EmbeddedPostgres(folder / "pg", durable=False)
        try:
            url = await server.start(database=name)
            await migrate_up(url)
            yield url
        finally:
            # remove(), not just stop(): as root the cluster may live outside ``folder``.
            server.remove()


@contextmanager
def temporary_folder(prefix: str) -> Iterator[Path]:
    """A new folder under the system temporary folder, deleted with all it holds when the
    block ends, whichever way: normally, by an exception, by Ctrl-C (KeyboardInterrupt, or
    the cancellation ``asyncio.run`` turns it into)."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def scratch_folder(prefix: str) -> Path:
    """A new folder under the system temporary folder, deleted when this process ends:
    normally, by an uncaught exception, or by Ctrl-C (the interpreter's exit runs
    ``atexit``). For folders that live as long as the benchmark, such as its services' logs."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def interrupt(
    process: subprocess.Popen[str], *, grace_s: float, send: bool = True
) -> tuple[str, str]:
    """Stops a benchmark process the way Ctrl-C would (SIGINT, unless ``send`` is False
    because it got the Ctrl-C itself), so it deletes its temporary folders; kills it only if
    it is still running after ``grace_s``. Returns what it printed."""
    if send and process.poll() is None:
        process.send_signal(signal.SIGINT)
    try:
        return process.communicate(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.communicate()


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


def loadavg() -> str:
    """The 1, 5 and 15 minute load averages: other work on the machine slows every figure."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"
