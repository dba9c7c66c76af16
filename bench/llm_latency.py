"""Many concurrent runs on one executor with a model that answers after a delay (1 s, and
0.5 s and 3 s in a full run): what one executor drives when runs wait on the model.

The stub Gemini server answers every call after ``--delays`` seconds (its own process: the
runner's when BENCH_STUB_URL is set, else one started here). ``--runs`` runs of ``--steps``
steps (each: one model call, one ``get_entity`` through ToolPool) are queued with
TriggerRun, at most ``--in-flight`` RPCs at a time as a well-behaved client sends them
(``_load.IN_FLIGHT``: under the server's per-connection stream limit, 100 by default; a
burst of 1,000 on one connection is refused with RST_STREAM REFUSED_STREAM). The
executor runs with ``--concurrency`` (default: every run at once, the "1,000 concurrent
runs on one executor" of issue #16; a full run also measures agentfleet's default
concurrency at 1 s) and ``--pool-size`` (default: agentfleet's); the per-project caps on
running and queued runs are raised to ``--runs`` (one project here; they are fairness
limits between projects). Read
from the database and /proc, not from a client following 1,000 streams (which would
measure the client):

- steps/s: all steps over the span from the first TriggerRun to the last run completed;
- step overhead beyond the model: gap between a run's consecutive tool calls (rows'
  ``created_at``) minus the model's delay: tool hop, persistence and scheduling;
- first event: a run's first event's ``created_at`` minus the wall clock when its own
  TriggerRun was sent (not when the batch began: a queued RPC waits for its turn);
- executor CPU per step and all-process CPU per step (executor, toolpool, PostgreSQL);
- busy database connections (sampled every 10 ms from ``pg_stat_activity``: in a statement
  or a transaction), p50/p99/max, beside the pool size: what the pool must hold;
- runs in flight: the most runs running at one time (between their rows' ``started_at``
  and ``completed_at``). With few steps a run can end before the last TriggerRun is
  answered, so fewer than ``--runs`` are ever in flight at once: the figure says how many;
- executor RSS per in-flight run: peak RSS while the runs wait on the model, minus RSS
  before, divided by the runs in flight (measured, as above). Each model delay gets a new
  executor process, so no case starts from the heap an earlier one grew.

``python bench/llm_latency.py [--quick] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import bench_database, machine, percentile, scratch_folder
from _load import (
    IN_FLIGHT,
    executor_environ,
    sampled_backends,
    seed,
    statuses,
    trigger_all,
    wait_finished,
)
from _procstat import CpuMeter, rss_kib
from _servers import postgres_facts, stub_process
from _stubctl import install_scripts, stepper

from agentfleet.config import load_settings
from agentfleet.postgres import db
from agentfleet.rpc.clients import open_channel
from agentfleet.testing.services import start_process_stack
from agentfleet.v1 import executor_pb2_grpc

AGENT = "slow"
MARKER = "[slow-model]"


async def sample_rss(pid: int, peak: list[int], stop: asyncio.Event) -> None:
    while not stop.is_set():
        peak[0] = max(peak[0], rss_kib(pid))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.1)


async def one_delay(ctx: dict[str, Any], delay: float, args: argparse.Namespace) -> dict[str, Any]:
    api, pool, pids = ctx["api"], ctx["pool"], ctx["pids"]
    await asyncio.to_thread(
        install_scripts, [stepper(MARKER, args.steps, ctx["entities"], delay)], ctx["stub_url"]
    )
    warm = await trigger_all([api], AGENT, 1)  # warm-up: connections, caches
    await wait_finished(pool, list(warm))
    executor, everything = CpuMeter([pids["executor"]]), CpuMeter(pids.values())
    before_kib, peak, stop = rss_kib(pids["executor"]), [0], asyncio.Event()
    sampler = asyncio.create_task(sample_rss(pids["executor"], peak, stop))
    executor.start()
    everything.start()
    began = time.perf_counter()
    async with sampled_backends(ctx["url"]) as backends:
        sent_at = await trigger_all([api], AGENT, args.runs, in_flight=args.in_flight)
        triggered_s = time.perf_counter() - began
        ids = list(sent_at)
        await wait_finished(pool, ids)
    elapsed = time.perf_counter() - began
    stop.set()
    await sampler
    steps = args.runs * args.steps
    cpu_exec, cpu_all = executor.stop(steps), everything.stop(steps)
    in_flight = await peak_in_flight(pool, ids)
    gaps = await pool.fetch(
        "SELECT extract(epoch FROM created_at - lag(created_at) OVER w) AS gap "
        "FROM kb.agent_run_tool_calls WHERE run_id = ANY($1::uuid[]) "
        "WINDOW w AS (PARTITION BY run_id ORDER BY created_at)",
        ids,
    )
    overheads = [float(r["gap"]) - delay for r in gaps if r["gap"] is not None]
    firsts = await pool.fetch(
        "SELECT run_id::text AS id, extract(epoch FROM min(created_at)) AS at "
        "FROM kb.agent_run_events WHERE run_id = ANY($1::uuid[]) GROUP BY run_id",
        ids,
    )
    first_ms = [(float(r["at"]) - sent_at[r["id"]]) * 1000 for r in firsts]
    return {
        "runs": args.runs,
        "steps_each": args.steps,
        "model_delay_s": delay,
        "statuses": await statuses(pool, ids),
        "wall_s": elapsed,
        "triggered_s": triggered_s,
        "steps_per_s": steps / elapsed,
        "overhead_p50_ms": percentile(overheads, 50) * 1000 if overheads else None,
        "overhead_p99_ms": percentile(overheads, 99) * 1000 if overheads else None,
        "overhead_n": len(overheads),
        "first_event_p50_ms": percentile(first_ms, 50) if first_ms else None,
        "first_event_p99_ms": percentile(first_ms, 99) if first_ms else None,
        "executor_cpu_ms_per_step": cpu_exec["system_ms_per_step"],
        "cpu_s_per_step": cpu_all["all_ms_per_step"] / 1000,
        "all_cpu_ms_per_step": cpu_all["all_ms_per_step"],
        "stub_cpu_ms_per_step": cpu_all["stub_ms_per_step"],
        "executor_rss_before_kib": before_kib,
        "executor_rss_peak_kib": peak[0],
        "runs_in_flight_peak": in_flight,
        "rss_kib_per_run": (peak[0] - before_kib) / max(1, in_flight),
        "cores": os.cpu_count() or 1,
        "pool_size": args.pool_size,
        "concurrency": args.concurrency,
        "in_flight": args.in_flight,
        **{k: v for k, v in backends.figures().items() if k.startswith("busy")},
    }


async def peak_in_flight(pool: Any, ids: list[str]) -> int:
    """The most of the runs ``ids`` running at one time (a start at the instant another
    run ends is counted after that end)."""
    return await pool.fetchval(
        "SELECT coalesce(max(n), 0) FROM (SELECT sum(d) OVER (ORDER BY at, d) AS n FROM ("
        "  SELECT started_at AS at, 1 AS d FROM kb.agent_runs"
        "  WHERE id = ANY($1::uuid[]) AND started_at IS NOT NULL"
        "  UNION ALL SELECT completed_at, -1 FROM kb.agent_runs"
        "  WHERE id = ANY($1::uuid[]) AND completed_at IS NOT NULL) AS e) AS s",
        ids,
    )


def print_figures(f: dict[str, Any]) -> None:
    label = f"{f['runs']} runs x {f['steps_each']} steps, model {f['model_delay_s']:g} s"
    print(f"{label}: {f['steps_per_s']:.1f} steps/s (wall {f['wall_s']:.2f} s), {f['statuses']}")
    print(
        f"  every TriggerRun answered {f['triggered_s']:.2f} s after the first was sent "
        f"({f['runs'] / f['triggered_s']:.0f} runs/s queued)"
    )
    print(
        f"  executor concurrency {f['concurrency']}, pool {f['pool_size']}; TriggerRun "
        f"{f['in_flight']} in flight; span: first TriggerRun to last run ended"
    )
    print(f"  runs in flight at once: at most {f['runs_in_flight_peak']} of {f['runs']}")
    print(
        f"  busy database connections (all processes) p50 {f['busy_p50']}, p99 "
        f"{f['busy_p99']}, max {f['busy_max']} (pool {f['pool_size']} per process)"
    )
    if f["overhead_p50_ms"] is not None:
        print(
            f"{'  step overhead beyond the model':<48} p50 {f['overhead_p50_ms']:8.3f} ms   "
            f"p99 {f['overhead_p99_ms']:8.3f} ms   (n={f['overhead_n']})"
        )
    if f["first_event_p50_ms"] is not None:
        print(
            f"{'  TriggerRun to first event':<48} p50 {f['first_event_p50_ms']:8.3f} ms   "
            f"p99 {f['first_event_p99_ms']:8.3f} ms   (n={f['runs']})"
        )
    print(
        f"  executor CPU {f['executor_cpu_ms_per_step']:.3f} ms/step; all processes "
        f"{f['all_cpu_ms_per_step']:.3f} ms/step; executor RSS per in-flight run "
        f"{f['rss_kib_per_run']:.1f} KiB (peak {f['executor_rss_peak_kib'] / 1024:.0f} MiB)"
    )


async def measure(
    url: str, stub_url: str, args: argparse.Namespace, concurrency: int, delay: float
) -> dict[str, Any]:
    """The runs at one model delay on a new executor of ``concurrency``."""
    args = argparse.Namespace(**{**vars(args), "concurrency": concurrency})
    seeded = await seed(url, AGENT, MARKER)
    stack = await start_process_stack(
        database_url=url,
        log_dir=scratch_folder("agentfleet-bench-llm-"),
        names=("toolpool", "executor"),
        environ=executor_environ(
            seeded,
            stub_url,
            runs=args.runs,
            concurrency=args.concurrency,
            pool_size=args.pool_size,
        ),
    )
    pool = await db.create_pool(url, min_size=1, max_size=2)
    try:
        async with open_channel(stack.addresses["executor"], token=seeded.admin) as channel:
            ctx = {
                "api": executor_pb2_grpc.ExecutorServiceStub(channel),
                "pool": pool,
                "pids": {name: p.pid for name, p in stack.processes.items()},
                "entities": seeded.entities,
                "stub_url": stub_url,
                "url": url,
            }
            figures = await one_delay(ctx, delay, args)
            print_figures(figures)
            return figures
    finally:
        await pool.close()
        await stack.stop(grace_s=5.0)


async def main(args: argparse.Namespace) -> None:
    print(f"machine: {machine()}")
    async with bench_database("llm_latency") as url:
        if not os.environ.get("BENCH_POSTGRES_PID"):
            # Standalone: PostgreSQL's CPU is counted all the same.
            os.environ["BENCH_POSTGRES_PID"] = str((await postgres_facts(url))[0])
        results: list[dict[str, Any]] = []
        with contextlib.ExitStack() as stack:
            stub_url = os.environ.get("BENCH_STUB_URL")
            if not stub_url:
                stub = stack.enter_context(stub_process())
                os.environ["BENCH_STUB_PID"], stub_url = str(stub.pid), stub.base_url
            for concurrency, delays in cases(args):
                for delay in delays:
                    results.append(await measure(url, stub_url, args, concurrency, delay))
    if args.json:
        # All runs at once at 1 s are the figures the targets name; the others beside them.
        first = next(
            (r for r in results if r["model_delay_s"] == 1.0 and r["concurrency"] >= r["runs"]),
            results[0],
        )
        args.json.write_text(json.dumps({**first, "by_delay": results}))


def cases(args: argparse.Namespace) -> list[tuple[int, list[float]]]:
    """(executor concurrency, model delays): every run at once (issue #16's "1,000
    concurrent runs on one executor") at each delay; in a full run also agentfleet's
    default concurrency at 1 s, the figure a deployment gets out of the box."""
    found = [(args.concurrency or args.runs, args.delays)]
    default = load_settings({}).executor_concurrency
    if not args.quick and not args.concurrency and default < args.runs:
        found.append((default, [1.0]))
    return found


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="50 runs, 1 s model only")
    parser.add_argument("--runs", type=int)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--delays", type=float, nargs="+")
    parser.add_argument(
        "--concurrency",
        type=int,
        help="AGENTFLEET_EXECUTOR_CONCURRENCY (default: --runs, every run at once; a full "
        "run also measures agentfleet's default at 1 s)",
    )
    parser.add_argument(
        "--pool-size",
        type=int,
        default=load_settings({}).db_pool_max,
        help="AGENTFLEET_DB_POOL_MAX (default: agentfleet's)",
    )
    parser.add_argument("--in-flight", type=int, default=IN_FLIGHT, help="TriggerRun at once")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    args.runs = args.runs or (50 if args.quick else 1000)
    args.delays = args.delays or ([1.0] if args.quick else [1.0, 0.5, 3.0])
    return args


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
