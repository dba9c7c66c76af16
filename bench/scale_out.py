"""Scale-out: 1, 2 and 3 executor processes on one database, the same fixed load on each.

``--runs`` runs of ``--steps`` steps (each: one model call to the stub, answering at once,
and one ``get_entity`` through ToolPool) are queued with TriggerRun, round robin over the
executors (at most 16 in flight), and run to their end. One toolpool process
serves every executor (as one toolpool Deployment would; its CPU is counted). Every
executor has agentfleet's default concurrency and pool; the project's fairness caps are
lifted to ``--runs``.

Per executor count: steps/s (span: first TriggerRun to the last run ended), CPU per step
over every process (executors, toolpool, PostgreSQL; the stub apart), transactions and
NOTIFYs per step, and whether commits serialise: PostgreSQL takes one lock for the whole
database (AccessExclusiveLock on object 0 of pg_database) in the commit of every
transaction that sent a NOTIFY and holds it through the commit's WAL flush, so such commits
happen one at a time. ``pg_stat_activity`` is sampled every 10 ms during the load: the
share of busy backends waiting on ``Lock:object`` (that lock), the ``Notify*`` LWLocks and
WAL flushes says how much of the time goes to that queue. The floor printed beside it: one
commit on the same server.

``python bench/scale_out.py [--quick] [--json out.json]`` (full: 200 runs x 6 steps on 1, 2
and 3 executors) (DATABASE_URL's server, else an
embedded one; BENCH_STUB_URL's stub, else one started here).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import bench_database, machine, scratch_folder
from _floors import commit_floor
from _load import (
    COMMITS,
    PROJECT,
    SAMPLE_S,
    TRANSACTIONS,
    executor_environ,
    sampled_backends,
    seed,
    statuses,
    trigger_all,
    wait_finished,
)
from _old_history import table_sizes
from _procstat import CpuMeter
from _scale import busy_shares, estimate_lines, notify_share
from _servers import describe, postgres_facts, stub_process
from _stubctl import install_scripts, stepper

from agentfleet import events
from agentfleet.config import load_settings
from agentfleet.postgres import db
from agentfleet.rpc.clients import open_channel
from agentfleet.testing.services import ProcessStack, start_process_stack
from agentfleet.v1 import executor_pb2_grpc

AGENT = "scaled"
MARKER = "[scale-out]"
CHANNELS = ("agentfleet_run_events", "agentfleet_runs_queued", "agentfleet_run_deltas")
"""The NOTIFY channels of a run's life (events, queue wake-ups, streamed deltas)."""


async def start_executor(url: str, environ: dict[str, str], toolpool: str) -> ProcessStack:
    return await start_process_stack(
        database_url=url,
        log_dir=scratch_folder("agentfleet-bench-scale-"),
        names=("executor",),
        environ={**environ, "AGENTFLEET_TOOLPOOL_ADDR": toolpool},
    )


async def notifying_writes(pool: Any, ids: list[str], received: list[tuple[str, str]]) -> int:
    """How many of the transactions behind ``received`` wrote (and so held the NOTIFY lock
    through a WAL flush): a run's queueing (its queue wake-up; the RUN_QUEUED notification
    is in the same commit) and its end (the notification of its last seq). Every other
    run-event notification was sent after its write committed, by the executor's
    RunEventNotifier, in a transaction that writes nothing."""
    rows = await pool.fetch(
        "SELECT id::text, last_event_seq FROM kb.agent_runs WHERE id = ANY($1::uuid[])", ids
    )
    ends = {f"{r['id']}:{r['last_event_seq']}" for r in rows}
    return sum(
        channel == "agentfleet_runs_queued" or (channel == events.CHANNEL and payload in ends)
        for channel, payload in received
    )


async def one_count(
    url: str, ctx: dict[str, Any], executors: list[ProcessStack], args: argparse.Namespace
) -> dict[str, Any]:
    toolpool, pool = ctx["toolpool"], ctx["pool"]
    channels = [open_channel(s.addresses["executor"], token=ctx["admin"]) for s in executors]
    try:
        apis = [executor_pb2_grpc.ExecutorServiceStub(c) for c in channels]
        # Warm-up: a run per executor (a new one's connections and caches).
        await wait_finished(pool, list(await trigger_all(apis, AGENT, len(apis))))
        # Two meters: the executors with PostgreSQL, and the toolpool apart.
        meter = CpuMeter(s.processes["executor"].pid for s in executors)
        tool_meter = CpuMeter([toolpool.processes["toolpool"].pid])
        notified = len(ctx["notifications"])
        transactions = await pool.fetchval(TRANSACTIONS)
        commits = await pool.fetchval(COMMITS)
        sizes = await table_sizes(pool)
        steps = args.runs * args.steps
        meter.start()
        tool_meter.start()
        began = time.perf_counter()
        async with sampled_backends(url) as backends:
            ids = list(await trigger_all(apis, AGENT, args.runs))
            await wait_finished(pool, ids)
        elapsed = time.perf_counter() - began
        cpu, tool_cpu = meter.stop(steps), tool_meter.stop(steps)
        commits = await pool.fetchval(COMMITS) - commits
        # A backend reports its transaction counts when it goes idle (and at most once a
        # second): read again after that, so the last transactions are in.
        await asyncio.sleep(1.1)
        transactions = await pool.fetchval(TRANSACTIONS) - transactions
        received = ctx["notifications"][notified:]
        writing = await notifying_writes(pool, ids, received)
        grown = {t: n - sizes[t] for t, n in (await table_sizes(pool)).items()}
    finally:
        for channel in channels:
            await channel.close()
    return {
        "executors": len(executors),
        "runs": args.runs,
        "steps": steps,
        "statuses": await statuses(pool, ids),
        "wall_s": elapsed,
        "steps_per_s": steps / elapsed,
        "cpu_all_ms_per_step": cpu["all_ms_per_step"] + tool_cpu["system_ms_per_step"],
        "cpu_executors_ms_per_step": cpu["system_ms_per_step"],
        "cpu_toolpool_ms_per_step": tool_cpu["system_ms_per_step"],
        "cpu_postgres_ms_per_step": cpu["postgres_ms_per_step"],
        "transactions_per_step": transactions / steps,
        "commits_per_step": commits / steps,
        "notifications_per_step": len(received) / steps,
        "notify_writes_per_step": writing / steps,
        "history_bytes_per_step": {t: n / steps for t, n in grown.items()},
        **backends.figures(),
    }


def print_figures(f: dict[str, Any], floor: dict[str, Any]) -> None:
    shares = busy_shares(f["waits"])
    print(
        f"{f['executors']} executor(s): {f['steps']} steps ({f['runs']} runs) in "
        f"{f['wall_s']:.2f} s = {f['steps_per_s']:.0f} steps/s, {f['statuses']}"
    )
    print(
        f"  CPU per step {f['cpu_all_ms_per_step']:.2f} ms all processes (executors "
        f"{f['cpu_executors_ms_per_step']:.2f}, toolpool {f['cpu_toolpool_ms_per_step']:.2f}, "
        f"PostgreSQL {f['cpu_postgres_ms_per_step']:.2f}); "
        f"{f['transactions_per_step']:.1f} transactions ({f['commits_per_step']:.2f} of them "
        "writing) and "
        f"{f['notifications_per_step']:.1f} NOTIFYs per step "
        f"({f['notify_writes_per_step']:.2f} in writing transactions)"
    )
    top = ", ".join(f"{w} {s:.0%}" for w, s in sorted(shares.items(), key=lambda x: -x[1])[:5])
    print(
        f"  busy backends by wait (n={f['samples']} samples every {SAMPLE_S * 1000:.0f} ms): "
        f"{top}; NOTIFY lock and queue {notify_share(f['waits']):.0%}; lock waiters mean "
        f"{f['lock_waiters_mean']:.2f}, max {f['lock_waiters_max']}"
    )
    stored = f["history_bytes_per_step"]
    tables = ", ".join(f"{t.removeprefix('kb.agent_')} {n:,.0f}" for t, n in stored.items() if n)
    print(f"  history stored per step: {sum(stored.values()):,.0f} B with indexes ({tables})")
    print(f"  busy backends p50 {f['busy_p50']}, p99 {f['busy_p99']}, max {f['busy_max']}")
    print(f"  floor: one commit p50 {floor['p50_ms']:.3f} ms (n={floor['n']})")


async def measure(url: str, stub_url: str, args: argparse.Namespace) -> dict[str, Any]:
    seeded = await seed(url, AGENT, MARKER)
    await asyncio.to_thread(
        install_scripts, [stepper(MARKER, args.steps, seeded.entities)], stub_url
    )
    defaults = load_settings({})
    environ = executor_environ(
        seeded,
        stub_url,
        runs=args.runs,
        concurrency=defaults.executor_concurrency,
        pool_size=defaults.db_pool_max,
    )
    _postmaster, settings = await postgres_facts(url)
    floor = await commit_floor(url, 500, 50)
    toolpool = await start_process_stack(
        database_url=url,
        log_dir=scratch_folder("agentfleet-bench-scale-"),
        names=("toolpool",),
        environ=environ,
    )
    pool = await db.create_pool(url, min_size=1, max_size=2)
    listener = await db.connect(url)
    notifications: list[tuple[str, str]] = []
    for channel in CHANNELS:
        await listener.add_listener(channel, lambda *a: notifications.append((a[2], a[3])))
    ctx = {
        "pool": pool,
        "notifications": notifications,
        "toolpool": toolpool,
        "environ": environ,
        "admin": seeded.admin,
    }
    executors: list[ProcessStack] = []
    try:
        results = []
        for count in sorted(args.executors):
            # The executors of the last count go on running; the new ones join them.
            while len(executors) < count:
                executors.append(await start_executor(url, environ, toolpool.addresses["toolpool"]))
            figures = await one_count(url, ctx, executors[:count], args)
            print_figures(figures, floor)
            results.append(figures)
    finally:
        for stack in executors:
            await stack.stop(grace_s=5.0)
        await listener.close()
        await pool.close()
        await toolpool.stop(grace_s=5.0)
    out = {
        "settings": describe(settings),
        "floor_commit": floor,
        "concurrency": defaults.executor_concurrency,
        "pool_size": defaults.db_pool_max,
        "cores": os.cpu_count() or 1,
        "by_executors": results,
        "project": PROJECT,
    }
    for line in estimate_lines(out):
        print(line)
    return out


async def main(args: argparse.Namespace) -> None:
    print(f"machine: {machine()}")
    async with bench_database("scale_out") as url:
        if not os.environ.get("BENCH_POSTGRES_PID"):
            os.environ["BENCH_POSTGRES_PID"] = str((await postgres_facts(url))[0])
        shared = os.environ.get("BENCH_STUB_URL")
        if shared:
            out = await measure(url, shared, args)
        else:
            with stub_process() as stub:
                os.environ["BENCH_STUB_PID"] = str(stub.pid)
                out = await measure(url, stub.base_url, args)
    if args.json:
        args.json.write_text(json.dumps(out))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="40 runs x 5 steps, 1 and 2 executors")
    parser.add_argument("--runs", type=int)
    parser.add_argument("--steps", type=int)
    parser.add_argument("--executors", type=int, nargs="+")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    args.runs = args.runs or (40 if args.quick else 200)
    args.steps = args.steps or (5 if args.quick else 6)
    args.executors = args.executors or ([1, 2] if args.quick else [1, 2, 3])
    return args


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
