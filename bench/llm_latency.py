"""Many concurrent runs on one executor with a model that answers after a delay (1 s, and
0.5 s and 3 s in a full run): what one executor drives when runs wait on the model.

The stub Gemini server answers every call after ``--delays`` seconds (its own process: the
runner's when BENCH_STUB_URL is set, else one started here). ``--runs`` runs of ``--steps``
steps (each: one model call, one ``get_entity`` through ToolPool) are queued with
TriggerRun at once, on an executor whose concurrency is ``--runs`` and whose pool is
``--pool-size``. Read from the database and /proc, not from a client following 1,000
streams (which would measure the client):

- steps/s: all steps over the span from the first TriggerRun to the last run completed;
- step overhead beyond the model: gap between a run's consecutive tool calls (rows'
  ``created_at``) minus the model's delay: tool hop, persistence and scheduling;
- first event: a run's first event's ``created_at`` minus the wall clock when its
  TriggerRun was sent;
- executor CPU per step and all-process CPU per step (executor, toolpool, PostgreSQL);
- executor RSS per in-flight run: peak RSS while all runs wait on the model, minus RSS
  before, divided by the runs.

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
from _procstat import CpuMeter, rss_kib
from _servers import postgres_facts, stub_process
from _stubctl import install_scripts, stepper

from agentfleet import db
from agentfleet.auth import TokenStore
from agentfleet.clients import open_channel
from agentfleet.testing.services import start_process_stack
from agentfleet.v1 import executor_pb2, executor_pb2_grpc
from services.executor.registry.definitions import (
    AgentDefinition,
    DefinitionRepository,
    ModelConfig,
)

PROJECT = "bench"
MARKER = "[slow-model]"
FINISH_TIMEOUT_S = 600.0


async def prepare(url: str) -> tuple[list[str], str, str]:
    pool = await db.create_pool(url, min_size=1, max_size=2)
    try:
        await DefinitionRepository(pool).upsert(
            PROJECT,
            AgentDefinition(
                name="slow",
                system_prompt=f"{MARKER} use get_entity",
                model=ModelConfig(name="stub"),
                tools=["get_entity"],
            ),
        )
        entities = [
            await pool.fetchval(
                "INSERT INTO kb.graph_objects (project_id, type, properties) "
                "VALUES ($1, 'Note', $2) RETURNING id::text",
                PROJECT,
                {"title": f"benchmark {i}"},
            )
            for i in range(16)
        ]
        tokens = TokenStore(pool)
        admin = (await tokens.create(project_id=PROJECT, role="admin")).token
        service = (await tokens.create(project_id=None, role="service", service="executor")).token
        return entities, admin, service
    finally:
        await pool.close()


async def wait_finished(pool: Any, ids: list[str]) -> None:
    deadline = time.monotonic() + FINISH_TIMEOUT_S
    while time.monotonic() < deadline:
        left = await pool.fetchval(
            "SELECT count(*) FROM kb.agent_runs WHERE id = ANY($1::uuid[]) "
            "AND status NOT IN ('completed', 'failed', 'cancelled')",
            ids,
        )
        if left == 0:
            return
        await asyncio.sleep(0.05)
    raise TimeoutError(f"runs not finished after {FINISH_TIMEOUT_S:.0f} s")


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
    request = executor_pb2.StartRunRequest(project_id=PROJECT, agent_name="slow", input="go")
    warm = await api.TriggerRun(request)  # warm-up: connections, caches
    await wait_finished(pool, [warm.id])
    executor, everything = CpuMeter([pids["executor"]]), CpuMeter(pids.values())
    before_kib, peak, stop = rss_kib(pids["executor"]), [0], asyncio.Event()
    sampler = asyncio.create_task(sample_rss(pids["executor"], peak, stop))
    executor.start()
    everything.start()
    sent: list[float] = []

    async def trigger() -> str:
        sent.append(time.time())
        return (await api.TriggerRun(request)).id

    began = time.perf_counter()
    ids = await asyncio.gather(*(trigger() for _ in range(args.runs)))
    await wait_finished(pool, ids)
    elapsed = time.perf_counter() - began
    stop.set()
    await sampler
    steps = args.runs * args.steps
    cpu_exec, cpu_all = executor.stop(steps), everything.stop(steps)
    statuses = await pool.fetch(
        "SELECT status, count(*) AS n FROM kb.agent_runs WHERE id = ANY($1::uuid[]) GROUP BY 1",
        ids,
    )
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
    sent_at = dict(zip(ids, sent, strict=True))
    first_ms = [(float(r["at"]) - sent_at[r["id"]]) * 1000 for r in firsts]
    return {
        "runs": args.runs,
        "steps_each": args.steps,
        "model_delay_s": delay,
        "statuses": {r["status"]: r["n"] for r in statuses},
        "wall_s": elapsed,
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
        "rss_kib_per_run": (peak[0] - before_kib) / args.runs,
        "cores": os.cpu_count() or 1,
        "pool_size": args.pool_size,
    }


def print_figures(f: dict[str, Any]) -> None:
    label = f"{f['runs']} runs x {f['steps_each']} steps, model {f['model_delay_s']:g} s"
    print(f"{label}: {f['steps_per_s']:.1f} steps/s (wall {f['wall_s']:.2f} s), {f['statuses']}")
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


async def measure(url: str, stub_url: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    entities, admin, service = await prepare(url)
    stack = await start_process_stack(
        database_url=url,
        log_dir=scratch_folder("agentfleet-bench-llm-"),
        names=("toolpool", "executor"),
        environ={
            "AGENTFLEET_SERVICE_TOKEN": service,
            "AGENTFLEET_LOG_LEVEL": "warning",
            "AGENTFLEET_GEMINI_BASE_URL": stub_url,
            "GEMINI_API_KEY": "bench",
            "AGENTFLEET_DB_POOL_MAX": str(args.pool_size),
            "AGENTFLEET_EXECUTOR_CONCURRENCY": str(args.runs),
        },
    )
    pool = await db.create_pool(url, min_size=1, max_size=2)
    try:
        async with open_channel(stack.addresses["executor"], token=admin) as channel:
            ctx = {
                "api": executor_pb2_grpc.ExecutorServiceStub(channel),
                "pool": pool,
                "pids": {name: p.pid for name, p in stack.processes.items()},
                "entities": entities,
                "stub_url": stub_url,
            }
            results = []
            for delay in args.delays:
                figures = await one_delay(ctx, delay, args)
                print_figures(figures)
                results.append(figures)
            return results
    finally:
        await pool.close()
        await stack.stop(grace_s=5.0)


async def main(args: argparse.Namespace) -> None:
    print(f"machine: {machine()}")
    async with bench_database("llm_latency") as url:
        if not os.environ.get("BENCH_POSTGRES_PID"):
            # Standalone: PostgreSQL's CPU is counted all the same.
            os.environ["BENCH_POSTGRES_PID"] = str((await postgres_facts(url))[0])
        shared = os.environ.get("BENCH_STUB_URL")
        if shared:
            results = await measure(url, shared, args)
        else:
            with stub_process() as stub:
                os.environ["BENCH_STUB_PID"] = str(stub.pid)
                results = await measure(url, stub.base_url, args)
    if args.json:
        # The 1 s figures are the ones the targets name; the others beside them.
        first = next((r for r in results if r["model_delay_s"] == 1.0), results[0])
        args.json.write_text(json.dumps({**first, "by_delay": results}))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="50 runs, 1 s model only")
    parser.add_argument("--runs", type=int)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--delays", type=float, nargs="+")
    parser.add_argument("--pool-size", type=int, default=20)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    args.runs = args.runs or (50 if args.quick else 1000)
    args.delays = args.delays or ([1.0] if args.quick else [1.0, 0.5, 3.0])
    return args


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
