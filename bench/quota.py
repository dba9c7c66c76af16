"""Two projects living within one model quota (issue 31): N runs of a big project and a few
of a small one, each run a chain of model calls, through two limiters (two replicas) on one
database against the stub in quota mode (Q calls per window).

Each replica is a real :class:`GenaiModelClient` with its own :class:`ModelQuotas` on the
bench database, calling the stub over HTTP with the real google-genai client and one
attempt per call (a 429 the limiter does not absorb fails the run). The big project's runs
start first; the small project's once the backlog waits. Printed, with the targets flagged:

- failed runs (target 0);
- wall time from the first call to the last answer against the ideal, total calls / Q
  (target <= 1.15x);
- 429s received, as a share of calls (target <= 2%);
- the small project's span against its own ideal, its calls / Q (target <= 2x: with equal
  weights it gets half the quota while the backlog runs);
- the most calls any window of the quota accepted, beside Q (one grant of slack allowed);
- limiter CPU per model call (target < 0.2 ms): the in-memory part timed on every call
  (slot taken, queued, handed over, released), plus one grant's client CPU (measured on
  sequential grants) times grants per call.

``python bench/quota.py [--quick] [--runs N] [--quota 20/10s]``; quick: 30 runs against
20 per 2 s (about 15 s); default: the issue's 40 runs against 20 per 10 s (about 70 s).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import bench_database, machine
from google.genai import types

from agentfleet.gemini_stub import GeminiStub, Reply, Script
from agentfleet.gemini_stub.quota import parse_quota
from agentfleet.llm import GenaiModelClient, QuotaScope, RetryPolicy
from agentfleet.llm.limiter.quota import ModelQuotas, QuotaConfig
from agentfleet.llm.limiter.quota_budget import ModelBudget
from agentfleet.llm.limiter.quota_store import BudgetStore
from agentfleet.postgres import db
from agentfleet.settings.quota_settings import ModelLimits, parse_model_quotas
from agentfleet.testing.gemini import stub_settings

MODEL = "gemini-2.5-flash"
CALLS_PER_RUN = 3
SMALL_RUNS = 5


class CpuMeter:
    """Thread CPU spent in the limiter's synchronous parts, summed over every call."""

    def __init__(self) -> None:
        self.ns = 0

    def wrap(self, owner: type, name: str) -> None:
        inner = getattr(owner, name)

        def timed(*args, **kwargs):  # type: ignore[no-untyped-def]
            started = time.thread_time_ns()
            try:
                return inner(*args, **kwargs)
            finally:
                self.ns += time.thread_time_ns() - started

        setattr(owner, name, timed)


async def one_run(client: GenaiModelClient, project: str, age: float) -> float | None:
    """A run's chain of calls; its finish time, None when a call failed."""
    contents = [types.Content(role="user", parts=[types.Part(text="go")])]
    try:
        for _ in range(CALLS_PER_RUN):
            reply = await client.generate(
                model=MODEL,
                system_instruction="You answer.",
                contents=contents,
                quota_scope=QuotaScope(project=project, age_key=age),
            )
            contents = [*contents, reply.content]
    except Exception as exc:
        print(f"  run failed: {exc}")
        return None
    return time.monotonic()


async def grant_cpu_s(url: str, limits: ModelLimits, rounds: int = 200) -> float:
    """Client CPU of one grant transaction, from ``rounds`` sequential grants."""
    pool = await db.create_pool(url, min_size=1, max_size=2)
    try:
        store = BudgetStore(pool, credential="feedfacefeedface")
        started = time.thread_time()
        for _ in range(rounds):
            await store.grant(
                "cpu-probe",
                limits,
                calls=1,
                tokens_per_call=0.0,
                token_debt=0.0,
                horizon_s=1e9,
                grant_s=1.0,
            )
        return (time.thread_time() - started) / rounds
    finally:
        await pool.close()


async def main(args: argparse.Namespace) -> int:
    limit_text, window_text = args.quota.split("/")
    limit, window_s = int(limit_text), float(window_text.rstrip("s"))
    rate = limit / window_s
    stub = GeminiStub(record_requests=False, quota=parse_quota(f"rpm={limit}/{window_s:g}s"))
    await stub.start()
    stub.add_script(Script(name="answer", policy=lambda request: Reply(text="ok")))
    meter = CpuMeter()
    for name in ("take_due", "pump", "expected_wait"):
        meter.wrap(ModelBudget, name)
    meter.wrap(ModelQuotas, "release")
    declared = parse_model_quotas(f"*:rpm={int(rate * 60)}")
    async with bench_database("quota") as url:
        pools = [await db.create_pool(url, min_size=1, max_size=4) for _ in range(2)]
        clients = [
            GenaiModelClient.from_settings(
                stub_settings(stub),
                retry=RetryPolicy.for_tests(1),
                quotas=ModelQuotas(
                    BudgetStore(pool, credential="0123456789abcdef"),
                    QuotaConfig(declared=declared, grant_s=args.grant_s),
                ),
            )
            for pool in pools
        ]
        try:
            started = time.monotonic()
            big = [
                asyncio.create_task(one_run(clients[i % 2], "big", float(i)))
                for i in range(args.runs)
            ]
            await asyncio.sleep(window_s / 2)  # the backlog waits for quota
            small_started = time.monotonic()
            small = [
                asyncio.create_task(one_run(clients[i % 2], "small", 1e12 + i))
                for i in range(SMALL_RUNS)
            ]
            small_done = await asyncio.gather(*small)
            big_done = await asyncio.gather(*big)
            wall = max(t for t in [*big_done, *small_done] if t is not None) - started
            grants = sum(c.quotas.granted_rounds for c in clients if c.quotas)
            slots = await pools[0].fetchval("SELECT sum(granted_total) FROM kb.model_quota_budgets")
        finally:
            for client in clients:
                await client.aclose()
            for pool in pools:
                await pool.close()
        per_grant_s = await grant_cpu_s(url, declared["*"])
    await stub.stop()

    calls = (args.runs + SMALL_RUNS) * CALLS_PER_RUN
    failed = [t for t in [*big_done, *small_done] if t is None]
    assert stub.quota is not None
    windows = [w for w in stub.quota.windows() if w.kind == "requests_per_minute"]
    refused = sum(w.refused for w in windows)
    ideal = calls / rate
    small_span = max((t for t in small_done if t is not None), default=float("nan"))
    small_span -= small_started
    small_ideal = SMALL_RUNS * CALLS_PER_RUN / rate
    fair_ideal = 2 * small_ideal  # its equal share: half of Q while the backlog runs
    cpu_ms = (meter.ns / 1e6 + grants * per_grant_s * 1e3) / calls
    print(f"machine: {machine()}")
    print(
        f"quota: n={args.runs}+{SMALL_RUNS} runs x {CALLS_PER_RUN} calls = {calls} calls, "
        f"Q={limit}/{window_s:g}s, two replicas, grant {args.grant_s:g} s"
    )
    checks = [
        ("failed runs", len(failed), "0", len(failed) == 0),
        (
            "wall time",
            f"{wall:.1f} s, floor (ideal) {ideal:.1f} s = {wall / ideal:.2f}x",
            "<= 1.15x",
            wall <= 1.15 * ideal,
        ),
        (
            "429s received",
            f"{refused} of {calls} calls = {100 * refused / calls:.1f}%",
            "<= 2%",
            refused <= 0.02 * calls,
        ),
        (
            "small project span",
            f"{small_span:.1f} s, own ideal {small_ideal:.1f} s = {small_span / small_ideal:.2f}x"
            f" (at its equal share, half of Q: {small_span / fair_ideal:.2f}x)",
            "<= 2x",
            small_span <= 2 * small_ideal,
        ),
        (
            "most calls in one window",
            f"{max(w.accepted for w in windows)} (Q={limit})",
            f"<= Q + one grant ({int(rate * args.grant_s)})",
            max(w.accepted for w in windows) <= limit + max(1, int(rate * args.grant_s)),
        ),
        (
            "limiter CPU per model call",
            f"{cpu_ms:.3f} ms ({grants} grants of {slots} slots in all,"
            f" {per_grant_s * 1e3:.2f} ms CPU each)",
            "< 0.2 ms",
            cpu_ms < 0.2,
        ),
    ]
    for name, value, target, ok in checks:
        print(f"  {name}: {value}  target {target}: {'ok' if ok else 'MISSED'}")
    # A missed target is a finding, flagged above and by make bench (bench/_targets.py), not
    # a failure of the bench: exit 0 so the runner reads the figures.
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="30 runs against 20 per 2 s")
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument("--quota", default=None, help="calls/window, like 20/10s")
    parser.add_argument("--grant-s", type=float, default=1.0)
    arguments = parser.parse_args()
    arguments.runs = arguments.runs or (30 if arguments.quick else 40)
    arguments.quota = arguments.quota or ("20/2s" if arguments.quick else "20/10s")
    sys.exit(asyncio.run(main(arguments)))
