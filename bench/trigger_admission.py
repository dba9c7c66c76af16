"""TriggerRun admission (issue #36): how many runs one executor process accepts per second
for ONE project, 64 TriggerRun in flight, and whether the project's queued cap stays exact
under that concurrency.

Admission alone is measured, not execution. Two executor processes start at once, each
with AGENTFLEET_EXECUTOR_CONCURRENCY=1 (and AGENTFLEET_EXECUTOR_PROCESSES=1, from
``_load.executor_environ``): the rate executor, whose project's queued cap is lifted above
phase 1's runs, and the cap executor, with AGENTFLEET_MAX_QUEUED_PER_PROJECT=``--cap`` (the
cap is the setting of the executor that answers TriggerRun). Before anything is timed, each
one's only slot is taken by a run whose model call never answers (the stub's ``hang``
reply): a full slot means no claim, so every run triggered afterwards stays queued, and the
executor's CPU is the RPCs' plus the NOTIFY each enqueue sends (it wakes the claim loop,
which finds no free slot). A slow model (``delay_s``) was the other way: it frees the slot
after its delay and lets runs execute while a phase lasts; a hung call holds it for as long
as the bench takes, whatever the machine's speed. No toolpool runs: the agent names
``get_entity``, but no run gets past its first model call.

- Phase 1, rate: ``--runs`` TriggerRun (after a warm-up of 64) of one project, its queued
  cap ``--headroom`` (2) times what it holds, ``--in-flight`` (64) at once on one channel to
  the rate executor (``_load.trigger_each``). Printed: the span from the first TriggerRun
  sent to the last answered, runs/s accepted, a TriggerRun's latency (p50/p99), CPU per
  accepted run of the executor, PostgreSQL and this client (all three share the machine's
  cores; the idle cap executor's apart), the floors (a bare gRPC echo to another process,
  one commit), and the target's arithmetic: CPU per run x 1,000 runs/s against one core
  (the executor is one process) and against every core. The database is read afterwards:
  every accepted run queued.
- Phase 2, the cap: 2.5 x ``--cap`` TriggerRun of another project, ``--in-flight`` at once,
  to the cap executor: exactly ``--cap`` admitted (rows queued, ids answered) and every
  other call answered RESOURCE_EXHAUSTED, no other code.

Each target is printed as ``  NAME: MEASURED  target TARGET: ok|MISSED``
(``bench/_targets.verdict_checks`` reads those lines); a missed target is a finding, not
a failure: the script exits 0.

``python bench/trigger_admission.py [--quick] [--runs N] [--cap C] [--in-flight K]
[--headroom H]`` (quick: 300 runs, cap 100; default: 2,000 runs, cap 300) on
DATABASE_URL's server, else an embedded one, and BENCH_STUB_URL's stub, else one started
here.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import bench_database, machine, report, scratch_folder
from _floors import commit_floor, grpc_floor, grpc_server_cpu
from _load import PROJECT, Answer, Seeded, executor_environ, seed, trigger_all, trigger_each
from _procstat import CpuMeter
from _servers import postgres_facts, stub_process
from _stubctl import install_scripts

from agentfleet.config import load_settings
from agentfleet.postgres import db
from agentfleet.rpc.clients import open_channel
from agentfleet.testing.services import ProcessStack, start_process_stack
from agentfleet.v1 import executor_pb2_grpc

AGENT = "admitted"
MARKER = "[trigger-admission]"
CAP_PROJECT = "bench-cap"
TARGET_RUNS_PER_S = 1000.0
WARMUP = 64
HELD_TIMEOUT_S = 30.0
HANG = {
    "name": MARKER,
    "match_system": MARKER,
    "per_conversation": True,
    "replies": [{"hang": True}],
}
"""The stub's script: every model call of these runs waits until the stub stops or resets."""


async def start_executor(url: str, environ: dict[str, str]) -> ProcessStack:
    # No toolpool: the agent names get_entity, but no run here gets past its model call.
    return await start_process_stack(
        database_url=url,
        log_dir=scratch_folder("agentfleet-bench-admission-"),
        names=("executor",),
        environ=environ,
    )


def phase_environ(seeded: Seeded, stub_url: str, *, cap: int) -> dict[str, str]:
    environ = executor_environ(
        seeded, stub_url, runs=cap, concurrency=1, pool_size=load_settings({}).db_pool_max
    )
    # The queued cap exactly as given (executor_environ lifts it one past ``runs``); a short
    # drain at the end: the held run never reaches a step boundary.
    return {
        **environ,
        "AGENTFLEET_MAX_QUEUED_PER_PROJECT": str(cap),
        "AGENTFLEET_SHUTDOWN_GRACE_S": "2",
    }


async def hold_a_slot(api: Any, pool: Any) -> None:
    """One run that takes an executor's one slot and keeps it (its model call hangs)."""
    (answer,) = await trigger_each([api], AGENT, 1)
    if answer.run_id is None:
        raise RuntimeError(f"the slot holder was refused: {answer.code.name}")
    deadline = time.monotonic() + HELD_TIMEOUT_S
    while time.monotonic() < deadline:
        status = await pool.fetchval(
            "SELECT status FROM kb.agent_runs WHERE id = $1::uuid", answer.run_id
        )
        if status == "running":
            return
        if status != "queued":
            raise RuntimeError(f"the slot holder ended {status}")
        await asyncio.sleep(0.02)
    raise TimeoutError(f"the slot holder was not claimed within {HELD_TIMEOUT_S:.0f} s")


async def by_status(pool: Any, project: str) -> dict[str, int]:
    rows = await pool.fetch(
        "SELECT status, count(*) AS n FROM kb.agent_runs WHERE project_id = $1 GROUP BY 1",
        project,
    )
    return {r["status"]: r["n"] for r in rows}


async def queued_of(pool: Any, answers: list[Answer]) -> int:
    """How many of the runs ``answers`` accepted are queued."""
    return await pool.fetchval(
        "SELECT count(*) FROM kb.agent_runs WHERE id = ANY($1::uuid[]) AND status = 'queued'",
        [a.run_id for a in answers if a.run_id is not None],
    )


def rate_cap(args: argparse.Namespace) -> int:
    """Phase 1's queued cap: room for its runs, warm-up and slot holders, ``--headroom``
    times over (the cap's shards each get a share: near the cap, admissions take the exact
    path that locks every shard, which is phase 2's case, not a project with room)."""
    return round(args.headroom * (args.runs + WARMUP + 2))


def span_s(answers: list[Answer]) -> float:
    """First TriggerRun sent to the last answered."""
    return max(a.sent + a.latency_s for a in answers) - min(a.sent for a in answers)


async def rate_phase(ctx: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """Phase 1 on the rate executor; the cap executor idles (its slot held) beside it."""
    api, pool = ctx["rate_api"], ctx["pool"]
    await trigger_all([api], AGENT, WARMUP, in_flight=args.in_flight)
    meter, idle = CpuMeter([ctx["pids"]["rate"]]), CpuMeter([ctx["pids"]["cap"]])
    meter.start()
    idle.start()
    client_began = time.process_time()
    answers = await trigger_each([api], AGENT, args.runs, in_flight=args.in_flight)
    client_s = time.process_time() - client_began
    accepted = max(1, sum(a.run_id is not None for a in answers))
    cpu, idle_cpu = meter.stop(accepted), idle.stop(accepted)
    return {
        "answers": answers,
        "accepted": sum(a.run_id is not None for a in answers),
        "codes": Counter(a.code.name for a in answers),
        "span_s": span_s(answers),
        "queued": await queued_of(pool, answers),
        "statuses": await by_status(pool, PROJECT),
        "executor_ms": cpu["system_ms_per_step"],
        "postgres_ms": cpu["postgres_ms_per_step"],
        "postgres_measured": cpu["postgres_measured"],
        "idle_executor_ms": idle_cpu["system_ms_per_step"],
        "client_ms": client_s * 1000 / accepted,
    }


async def cap_phase(ctx: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """Phase 2 on the cap executor, in a project of its own."""
    calls = int(2.5 * args.cap)
    answers = await trigger_each(
        [ctx["cap_api"]], AGENT, calls, in_flight=args.in_flight, project=CAP_PROJECT
    )
    statuses = await by_status(ctx["pool"], CAP_PROJECT)
    return {
        "calls": calls,
        "accepted": sum(a.run_id is not None for a in answers),
        "codes": Counter(a.code.name for a in answers),
        "queued": statuses.get("queued", 0),
        "statuses": statuses,
        "queued_answered": await queued_of(ctx["pool"], answers),
        "span_s": span_s(answers),
    }


def print_figures(
    rate: dict[str, Any], cap: dict[str, Any], floors: dict[str, Any], args: argparse.Namespace
) -> None:
    n, k, cores = args.runs, args.in_flight, os.cpu_count() or 1
    per_s = rate["accepted"] / rate["span_s"]
    print(
        f"trigger admission: one executor process, concurrency 1 (its slot held by a run whose "
        f"model call hangs), pool {load_settings({}).db_pool_max}; TriggerRun {k} in flight on "
        f"one channel"
    )
    print(
        f"phase 1: {n} TriggerRun of one project, {rate['accepted']} accepted in "
        f"{rate['span_s']:.2f} s (first sent to last answered) = {per_s:.0f} runs/s; "
        f"codes {dict(rate['codes'])}"
    )
    latencies = [a.latency_s for a in rate["answers"]]
    print(report(f"  TriggerRun latency, {k} in flight", latencies))
    bare = floors.pop("gRPC server CPU")
    for name, f in floors.items():
        print(
            f"{'  floor: ' + name:<48} p50 {f['p50_ms']:8.3f} ms   p99 {f['p99_ms']:8.3f} ms   "
            f"(n={f['n']}) {f['span']}"
        )
    print(
        f"  floor: a bare grpc.aio server process's CPU per unary echo of 64 bytes, "
        f"{bare['in_flight']} in flight: {bare['server_cpu_ms_per_call']:.3f} ms (n={bare['n']})"
    )
    total = rate["executor_ms"] + rate["postgres_ms"] + rate["client_ms"]
    # What the other two cost with the executor at what any grpc.aio server costs per call.
    at_floor = total - rate["executor_ms"] + bare["server_cpu_ms_per_call"]
    pg_note = "" if rate["postgres_measured"] else " (PostgreSQL not measured: no pid)"
    print(
        f"  CPU per accepted run: executor {rate['executor_ms']:.3f} ms, PostgreSQL "
        f"{rate['postgres_ms']:.3f} ms, this client {rate['client_ms']:.3f} ms = "
        f"{total:.3f} ms{pg_note}; the idle cap executor beside it "
        f"{rate['idle_executor_ms']:.3f} ms (woken by each enqueue's NOTIFY)"
    )
    print(
        f"  arithmetic for {TARGET_RUNS_PER_S:.0f} runs/s: the executor (one process, one core) "
        f"{rate['executor_ms']:.3f} ms x {TARGET_RUNS_PER_S:.0f} = "
        f"{rate['executor_ms'] * TARGET_RUNS_PER_S / 1000:.2f} core of 1 "
        f"(its ceiling {1000 / max(rate['executor_ms'], 1e-9):.0f} runs/s); all three "
        f"{total:.3f} ms x {TARGET_RUNS_PER_S:.0f} = {total * TARGET_RUNS_PER_S / 1000:.2f} "
        f"cores of {cores} (ceiling {cores * 1000 / max(total, 1e-9):.0f} runs/s); with "
        f"the executor at the bare server's floor, all three {at_floor:.3f} ms (ceiling "
        f"{cores * 1000 / max(at_floor, 1e-9):.0f} runs/s)"
    )
    print(
        f"  database: {rate['queued']} of the {rate['accepted']} accepted runs queued; project "
        f"'{PROJECT}' by status {rate['statuses']} (warm-up {WARMUP} and both slot holders "
        "included)"
    )
    print(
        f"phase 2: cap {args.cap}, {cap['calls']} TriggerRun of one project, {k} in flight, in "
        f"{cap['span_s']:.2f} s: {cap['accepted']} accepted, {cap['queued']} rows queued "
        f"({cap['queued_answered']} of them answered), codes {dict(cap['codes'])}"
    )
    print("targets:")
    for name, value, target, ok in target_checks(rate, cap, args):
        print(f"  {name}: {value}  target {target}: {'ok' if ok else 'MISSED'}")


def target_checks(
    rate: dict[str, Any], cap: dict[str, Any], args: argparse.Namespace
) -> list[tuple[str, str, str, bool]]:
    """(name, measured, target, met) of issue #36's two targets."""
    n, k, cores = args.runs, args.in_flight, os.cpu_count() or 1
    per_s = rate["accepted"] / rate["span_s"]
    total = rate["executor_ms"] + rate["postgres_ms"] + rate["client_ms"]
    refused = cap["codes"].get("RESOURCE_EXHAUSTED", 0)
    exact = (
        cap["accepted"] == cap["queued"] == cap["queued_answered"] == args.cap
        and refused == cap["calls"] - args.cap
        and set(cap["codes"]) <= {"OK", "RESOURCE_EXHAUSTED"}
    )
    all_queued = rate["queued"] == rate["accepted"] == n
    return [
        (
            f"runs/s accepted at {k} in flight",
            f"{per_s:.0f} runs/s ({rate['accepted']} in {rate['span_s']:.2f} s, "
            f"{rate['queued']} queued; CPU {total:.2f} ms per run on {cores} cores)",
            f">= {TARGET_RUNS_PER_S:.0f} runs/s, every run queued",
            per_s >= TARGET_RUNS_PER_S and all_queued,
        ),
        (
            f"queued cap of {args.cap} at {k} in flight",
            f"{cap['queued']} queued, {cap['accepted']} accepted, {refused} RESOURCE_EXHAUSTED "
            f"of {cap['calls']}, other codes "
            f"{sum(v for c, v in cap['codes'].items() if c not in ('OK', 'RESOURCE_EXHAUSTED'))}",
            f"exactly {args.cap} admitted, the rest RESOURCE_EXHAUSTED",
            exact,
        ),
    ]


async def measure(url: str, stub_url: str, args: argparse.Namespace) -> None:
    seeded = await seed(url, AGENT, MARKER)
    cap_seeded = await seed(url, AGENT, MARKER, project=CAP_PROJECT)
    await asyncio.to_thread(install_scripts, [HANG], stub_url)
    floors = {
        "gRPC echo": await grpc_floor(args.floor_n, args.floor_n // 10),
        "one commit": await commit_floor(url, args.floor_n, args.floor_n // 10),
        "gRPC server CPU": await grpc_server_cpu(4 * args.floor_n, args.in_flight),
    }
    # Both executors at once (each phase's cap is its executor's setting); both slots are
    # held before anything is timed, so neither claims a run of either phase.
    started = await asyncio.gather(
        start_executor(url, phase_environ(seeded, stub_url, cap=rate_cap(args))),
        start_executor(url, phase_environ(cap_seeded, stub_url, cap=args.cap)),
        return_exceptions=True,
    )
    stacks = [s for s in started if isinstance(s, ProcessStack)]
    if len(stacks) < len(started):
        await asyncio.gather(*(stack.stop(grace_s=5.0) for stack in stacks))
        raise next(s for s in started if isinstance(s, BaseException))
    pool = await db.create_pool(url, min_size=1, max_size=2)
    try:
        rate_address, cap_address = (s.addresses["executor"] for s in stacks)
        async with (
            open_channel(rate_address, token=seeded.admin) as rate_channel,
            open_channel(cap_address, token=cap_seeded.admin) as cap_channel,
        ):
            ctx = {
                "pool": pool,
                "rate_api": executor_pb2_grpc.ExecutorServiceStub(rate_channel),
                "cap_api": executor_pb2_grpc.ExecutorServiceStub(cap_channel),
                "pids": {
                    name: stack.processes["executor"].pid
                    for name, stack in zip(("rate", "cap"), stacks, strict=True)
                },
            }
            for _ in stacks:
                await hold_a_slot(ctx["rate_api"], pool)
            rate = await rate_phase(ctx, args)
            cap = await cap_phase(ctx, args)
    finally:
        await pool.close()
        await asyncio.gather(*(stack.stop(grace_s=5.0) for stack in stacks))
        # Let the hung model calls go (the runner's stub serves the next script).
        with contextlib.suppress(OSError):
            await asyncio.to_thread(install_scripts, [], stub_url)
    print_figures(rate, cap, floors, args)


async def main(args: argparse.Namespace) -> None:
    print(f"machine: {machine()}")
    async with bench_database("trigger_admission") as url:
        if not os.environ.get("BENCH_POSTGRES_PID"):
            os.environ["BENCH_POSTGRES_PID"] = str((await postgres_facts(url))[0])
        shared = os.environ.get("BENCH_STUB_URL")
        if shared:
            await measure(url, shared, args)
        else:
            with stub_process() as stub:
                os.environ["BENCH_STUB_PID"] = str(stub.pid)
                await measure(url, stub.base_url, args)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="300 runs, cap 100")
    parser.add_argument("--runs", type=int)
    parser.add_argument("--cap", type=int)
    parser.add_argument(
        "--headroom", type=float, default=2.0, help="phase 1's cap over its runs (default 2x)"
    )
    parser.add_argument("--in-flight", type=int, default=64, help="TriggerRun at once (issue #36)")
    args = parser.parse_args()
    args.runs = args.runs or (300 if args.quick else 2000)
    args.cap = args.cap or (100 if args.quick else 300)
    args.floor_n = 200 if args.quick else 1000
    return args


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
