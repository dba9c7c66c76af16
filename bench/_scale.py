"""What scale_out.py's figures say: the share of busy PostgreSQL backends by wait event, and
an estimate for N executor replicas on a real cluster, with its reasoning and assumptions
stated (pure functions: tests/unit/test_bench_scale.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

NOTIFY_WAITS = (
    "Lock:object",
    "LWLock:NotifyQueue",
    "LWLock:NotifyQueueTail",
    "LWLock:NotifySLRU",
    "LWLock:NotifyBuffer",
)
"""Waits of a commit that sent a NOTIFY: the database-wide lock (AccessExclusiveLock on
object 0 of pg_database, held from the commit's start through its WAL flush) and the
notification queue's own locks."""
SERIALISED_SHARE = 0.2
"""Above this share of busy backend time spent on NOTIFY waits, commits are serialising."""


@dataclass(frozen=True, slots=True)
class Cluster:
    """What the estimate assumes of a real cluster (stated beside it)."""

    executor_cores: float = 1.0
    """CPU of one executor replica (one core: the Python process runs one thread of work)."""
    postgres_cores: float = 8.0
    flush_ms: float = 1.0
    """One WAL flush on network-attached storage (cloud SSD volumes: about 0.5-2 ms)."""


def busy_shares(waits: dict[str, int]) -> dict[str, float]:
    """Each wait event's share of all busy-backend samples ("CPU": not waiting)."""
    total = sum(waits.values())
    return {w: n / total for w, n in waits.items()} if total else {}


def notify_share(waits: dict[str, int]) -> float:
    shares = busy_shares(waits)
    return sum(shares.get(w, 0.0) for w in NOTIFY_WAITS)


def ceilings(one: dict[str, Any], floor_ms: float, cluster: Cluster) -> dict[str, float]:
    """Steps/s ceilings from one executor's figures: per executor replica (its CPU per
    step), PostgreSQL's CPU, and NOTIFYing writes committed one at a time (each holds the
    lock through its flush: the slower of the cluster's flush and this machine's commit)."""
    notifies = one["notify_writes_per_step"]
    return {
        "per_replica": cluster.executor_cores * 1000 / one["cpu_executors_ms_per_step"],
        "postgres_cpu": cluster.postgres_cores * 1000 / one["cpu_postgres_ms_per_step"],
        "notify_commits": 1000 / max(cluster.flush_ms, floor_ms) / notifies
        if notifies
        else float("inf"),
    }


def estimate_lines(out: dict[str, Any], cluster: Cluster | None = None) -> list[str]:
    """The scale-out section's text: what was measured, what limits it here, and the
    estimate for N replicas on a real cluster."""
    cluster = cluster or Cluster()
    runs = out["by_executors"]
    if not runs:
        return []
    one, floor_ms = runs[0], out["floor_commit"]["p50_ms"]
    base = one["steps_per_s"]
    measured = ", ".join(
        f"{r['executors']} -> {r['steps_per_s']:.0f} steps/s ({r['steps_per_s'] / base:.2f}x, "
        f"NOTIFY waits {notify_share(r['waits']):.0%} of busy backend time)"
        for r in runs
    )
    return [
        f"- measured ({out['settings']}; executor concurrency {out['concurrency']}, pool "
        f"{out['pool_size']} each; one toolpool): {measured}",
        f"- what limits it here: {'; '.join(limits_here(out))}",
        *_estimate(one, floor_ms, cluster),
    ]


def limits_here(out: dict[str, Any]) -> list[str]:
    """Each limit the measurement ran into on this machine (several can hold at once)."""
    runs = out["by_executors"]
    cpu_limit = out["cores"] * 1000 / max(r["cpu_all_ms_per_step"] for r in runs)
    notify = max(notify_share(r["waits"]) for r in runs)
    advisory = max(busy_shares(r["waits"]).get("Lock:advisory", 0.0) for r in runs)
    found = []
    if max(r["steps_per_s"] for r in runs) >= 0.8 * cpu_limit:
        found.append(
            f"this machine's {out['cores']} cores, shared by every process: "
            f"{cpu_limit:.0f} steps/s at the measured CPU per step (all processes), so "
            "another executor here splits the same cores"
        )
    if notify > SERIALISED_SHARE:
        found.append(
            f"commits serialise on the NOTIFY lock (up to {notify:.0%} of busy backend time "
            "waiting for it): more executors wait longer, they do not commit faster"
        )
    if advisory > SERIALISED_SHARE:
        found.append(
            "TriggerRuns of one project take turns on its enqueue lock (the queued-runs "
            f"cap): Lock:advisory up to {advisory:.0%} of busy backend time, each waiter "
            "holding a pool connection"
        )
    return found or [
        f"neither the cores ({cpu_limit:.0f} steps/s) nor a lock: latency between the "
        f"processes (queue wake-ups, the toolpool hop); NOTIFY waits at most {notify:.0%}"
    ]


def _estimate(one: dict[str, Any], floor_ms: float, cluster: Cluster) -> list[str]:
    """The estimate for N replicas from one executor's figures, its assumptions stated."""
    c = ceilings(one, floor_ms, cluster)
    knee = min(c["postgres_cpu"], c["notify_commits"]) / c["per_replica"]
    bound = "PostgreSQL's CPU" if c["postgres_cpu"] < c["notify_commits"] else "NOTIFY commits"
    return [
        f"- estimate for N executor replicas on a real cluster (an estimate, not a "
        f"measurement): one replica of {cluster.executor_cores:g} core drives about "
        f"{c['per_replica']:.0f} steps/s ({one['cpu_executors_ms_per_step']:.2f} ms executor "
        f"CPU per step, measured here); PostgreSQL on {cluster.postgres_cores:g} cores "
        f"about {c['postgres_cpu']:.0f} steps/s ({one['cpu_postgres_ms_per_step']:.2f} ms "
        f"per step); NOTIFYing commits one at a time at {max(cluster.flush_ms, floor_ms):.2f} "
        f"ms each (a {cluster.flush_ms:g} ms WAL flush; one commit here "
        f"{floor_ms:.3f} ms) with {one['notify_writes_per_step']:.2f} NOTIFYing writes per "
        f"step (of {one['notifications_per_step']:.1f} NOTIFYs; the rest are sent after their "
        f"write commits, in transactions that write nothing): about "
        f"{c['notify_commits']:.0f} steps/s",
        f"- so throughput grows with N up to about {knee:.1f} replicas of "
        f"{cluster.executor_cores:g} core (~{min(c['postgres_cpu'], c['notify_commits']):.0f} "
        f"steps/s), where {bound} bound it; past that more replicas add nothing. "
        f"The toolpool scales apart ({one['cpu_toolpool_ms_per_step']:.2f} ms per step). "
        "With LLM latency a replica is rarely CPU-bound: it drives about concurrency / model "
        "latency steps/s, and the cluster's runs in flight are bounded by the same ceiling "
        "times the model latency",
    ]


def scale_section(out: dict[str, Any]) -> list[str]:
    """RESULTS' scale-out section: a row per executor count, then the reading of it."""
    if not out.get("by_executors"):
        return []
    floor = out["floor_commit"]
    lines = [
        "## Scale-out: executors on one PostgreSQL",
        "",
        f"`bench/scale_out.py` on {out['settings']}: {out['by_executors'][0]['runs']} runs x "
        f"{out['by_executors'][0]['steps'] // out['by_executors'][0]['runs']} steps queued "
        "with TriggerRun (16 in flight, round robin over the executors), the stub model "
        "answering at once, `get_entity` through one shared toolpool; each executor with "
        f"concurrency {out['concurrency']} and pool {out['pool_size']} (the defaults). Span: "
        "first TriggerRun to last run ended. CPU from /proc over the span (stub apart). Busy "
        "backends sampled from `pg_stat_activity` every 10 ms. History B/step: what the "
        "history tables (indexes and TOAST included) grew by over the span, per step. "
        "Floor: one commit p50 "
        f"{floor['p50_ms']:.3f} ms (n={floor['n']}).",
        "",
        "| executors | steps | steps/s | vs 1 | CPU ms/step all | executors | toolpool | "
        "PostgreSQL | transactions/step | of them writing | NOTIFYs/step | of them in writes | "
        "NOTIFY waits | history B/step | top waits |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    base = out["by_executors"][0]["steps_per_s"]
    for r in out["by_executors"]:
        shares = busy_shares(r["waits"])
        top = ", ".join(f"{w} {s:.0%}" for w, s in sorted(shares.items(), key=lambda x: -x[1])[:3])
        lines.append(
            f"| {r['executors']} | {r['steps']} | {r['steps_per_s']:.0f} | "
            f"{r['steps_per_s'] / base:.2f}x | {r['cpu_all_ms_per_step']:.2f} | "
            f"{r['cpu_executors_ms_per_step']:.2f} | {r['cpu_toolpool_ms_per_step']:.2f} | "
            f"{r['cpu_postgres_ms_per_step']:.2f} | {r['transactions_per_step']:.1f} | "
            f"{r.get('commits_per_step', float('nan')):.2f} | "
            f"{r['notifications_per_step']:.1f} | {r['notify_writes_per_step']:.2f} | "
            f"{notify_share(r['waits']):.0%} | "
            f"{sum(r.get('history_bytes_per_step', {}).values()):,.0f} | {top} |"
        )
    return [*lines, "", *estimate_lines(out), ""]
