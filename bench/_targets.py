"""The targets of issues #16, #31 and #36, checked against a run's figures: each check says what was
wanted, what was measured and whether it was met, so a missed target is flagged in
RESULTS.md and in the README's Performance block instead of printed as a plain number."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

HEADLINE_PEER = "langgraph (sync)"
"""LangGraph awaiting its checkpoints, as agentfleet and ADK await their commits."""


@dataclass(frozen=True, slots=True)
class Check:
    target: str
    measured: str
    met: bool | None
    """None: a figure was missing, so the target could not be checked (not a pass)."""

    @property
    def status(self) -> str:
        return {True: "met", False: "MISSED", None: "NOT MEASURED"}[self.met]


def _at_most(target: str, value: float | None, limit: float | None, unit: str) -> Check:
    if value is None or limit is None:
        return Check(target, "n/a", None)
    return Check(target, f"{value:.2f} {unit} vs limit {limit:.2f} {unit}", value <= limit)


def _at_least(target: str, value: float | None, floor: float | None, unit: str) -> Check:
    if value is None or floor is None:
        return Check(target, "n/a", None)
    return Check(target, f"{value:.2f} {unit} vs needed {floor:.2f} {unit}", value >= floor)


def _cpu(s: dict[str, Any]) -> float | None:
    return s.get("cpu_all_ms_per_step")


def peer_checks(summary: dict[str, dict[str, Any]]) -> list[Check]:
    """Same model server, durability and pool: step p50, 50-agent throughput, CPU per step."""
    af = summary.get("agentfleet", {})
    lg = summary.get(HEADLINE_PEER, {})
    adk = summary.get("adk", {})

    def scaled(s: dict[str, Any], key: str, factor: float) -> float | None:
        return s[key] * factor if s.get(key) is not None else None

    agents = af.get("agents") or "N"
    return [
        _at_most(
            f"step p50 <= {HEADLINE_PEER}",
            af.get("step_p50_ms"),
            lg.get("step_p50_ms"),
            "ms",
        ),
        _at_most(
            "step p50 <= 0.5x adk", af.get("step_p50_ms"), scaled(adk, "step_p50_ms", 0.5), "ms"
        ),
        _at_least(
            f"{agents}-agent throughput >= 1.5x {HEADLINE_PEER}",
            af.get("concurrent_steps_per_s"),
            scaled(lg, "concurrent_steps_per_s", 1.5),
            "steps/s",
        ),
        _at_least(
            f"{agents}-agent throughput >= 1.5x adk",
            af.get("concurrent_steps_per_s"),
            scaled(adk, "concurrent_steps_per_s", 1.5),
            "steps/s",
        ),
        _at_most(f"CPU per step, all processes <= {HEADLINE_PEER}", _cpu(af), _cpu(lg), "ms"),
        _at_most("CPU per step, all processes <= adk", _cpu(af), _cpu(adk), "ms"),
    ]


def step_cost_checks(
    durable: dict[str, dict[str, Any]], scale: dict[str, Any], *, expected: bool = False
) -> list[Check]:
    """Issue 36's per-step costs: CPU of every process and PostgreSQL's share at 50 runs at
    once on durable PostgreSQL (the peer rounds' agentfleet), and writing transactions per
    step (transaction ids taken; reads commit nothing) with one executor (scale_out.py)."""
    af = durable.get("agentfleet", {})
    one = next((r for r in scale.get("by_executors", []) if r.get("executors") == 1), {})
    if not (af or one) and not expected:
        return []
    return [
        _at_most("CPU per step, all processes, 50 runs at once <= 3.0 ms", _cpu(af), 3.0, "ms"),
        _at_most(
            "PostgreSQL's CPU per step, 50 runs at once <= 1.0 ms",
            af.get("cpu_postgres_ms_per_step"),
            1.0,
            "ms",
        ),
        _at_most(
            "writing transactions per step, one executor <= 0.6",
            one.get("commits_per_step"),
            0.6,
            "txn/step",
        ),
    ]


def latency_checks(figures: dict[str, Any], *, expected: bool = False) -> list[Check]:
    """Many concurrent runs on one executor with a slow model (``llm_latency.py --json``).
    No figures: nothing to check, unless the script was ``expected`` to give some (it ran
    and failed): then the targets are flagged NOT MEASURED."""
    if not figures:
        missing = Check("runs at 1 s model latency on one executor", "no figures", None)
        return [missing] if expected else []
    runs, delay = figures["runs"], figures["model_delay_s"]
    cpu_s = figures.get("cpu_s_per_step")
    # The lesser of two limits: the model's pace, and what the cores can execute.
    limits = [runs / delay] + ([figures["cores"] / cpu_s] if cpu_s else [])
    label = f"{runs} runs at {delay:g} s"
    return [
        _at_least(
            f"{label}: steps/s >= 80% of the lesser limit",
            figures.get("steps_per_s"),
            0.8 * min(limits),
            "steps/s",
        ),
        _at_most(
            f"{label}: overhead p99 beyond the model < 50 ms",
            figures.get("overhead_p99_ms"),
            50.0,
            "ms",
        ),
        _at_most(
            f"{label}: executor RSS per in-flight run < 100 KB",
            figures.get("rss_kib_per_run"),
            100.0,
            "KiB",
        ),
        _at_most(
            f"{label}: first event after TriggerRun < 50 ms (p50)",
            figures.get("first_event_p50_ms"),
            50.0,
            "ms",
        ),
    ]


_CPU_LINE = re.compile(r"^executor CPU ([0-9.]+) ms per step")
IN_MEMORY_PART = "one run,"
"""executor_steps.py's part whose tools live in the executor's memory (the target's case)."""


def step_cpu_checks(info: list[str], *, expected: bool = False) -> list[Check]:
    """Executor CPU per step < 1.5 ms with an in-memory tool, from executor_steps.py's lines:
    each part prints a heading, then the CPU of its runs of 200 steps (the median of
    ``--repeats`` runs) and of 50 runs at once (run claim, start and finish included)."""
    part, found = "", []
    for line in info:
        if line.endswith("warm-up):"):
            part = line
        elif (m := _CPU_LINE.match(line)) and part.startswith(IN_MEMORY_PART):
            found.append(float(m.group(1)))
    if not found:
        missing = Check("executor CPU per step < 1.5 ms, in-memory tool", "no figures", None)
        return [missing] if expected else []
    parts = ("runs of 200 steps, median", "50 runs at once")
    return [
        _at_most(f"executor CPU per step < 1.5 ms, in-memory tool ({what})", value, 1.5, "ms")
        for what, value in zip(parts, found, strict=False)
    ]


_VERDICT_LINE = re.compile(
    r"^\s*(?P<name>[^:]+): (?P<value>.+?)  target (?P<target>.+): (?P<status>ok|MISSED)$"
)


def verdict_checks(
    area: str, lines: list[str], *, issue: str, expected: bool = False
) -> list[Check]:
    """The targets a bench script checked itself, each printed as a line
    ``  NAME: MEASURED  target TARGET: ok|MISSED``: ``bench/quota.py`` (issue 31: failed runs,
    wall time against the ideal, 429s, the small project's span, the fullest window, limiter
    CPU per model call), ``bench/trigger_admission.py`` (issue 36: runs/s accepted of one
    project at 64 TriggerRun in flight, the queued cap exact under that concurrency) and
    ``bench/prune.py`` (issue 36: old runs left, recent and live runs untouched, the writers'
    p99 during the prune against without). Named ``AREA: NAME TARGET``; none found in a
    script that ran: ``issue``'s targets NOT MEASURED."""
    found = [
        Check(f"{area}: {m['name']} {m['target']}", m["value"], m["status"] == "ok")
        for line in lines
        if (m := _VERDICT_LINE.match(line))
    ]
    if not found and expected:
        return [Check(f"{area}: {issue}'s targets", "no figures", None)]
    return found


def checks_table(checks: list[Check]) -> list[str]:
    lines = ["| target | measured | status |", "|---|---|---|"]
    for c in checks:
        status = c.status if c.met else f"**{c.status}**"
        lines.append(f"| {c.target} | {c.measured} | {status} |")
    return lines


def missed_lines(checks: list[Check]) -> list[str]:
    """One line per target not met or not measured, for the headline block."""
    return [f"{c.status}: {c.target} ({c.measured})" for c in checks if not c.met]
