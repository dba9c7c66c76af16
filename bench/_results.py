"""RESULTS.md from what run_all.py gathered: a table per area, the peer comparison, headlines."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from _common import percentile
from _parse import Parsed

AREAS = {
    "executor_steps.py": "Step overhead and concurrent steps/s (executor loop, in-memory tools)",
    "spawn_fanout.py": "Spawn fan-out",
    "toolpool_calltool.py": "CallTool (built-in tool over loopback gRPC)",
    "dispatch.py": "Dispatch latency and per-task overhead",
    "history_pagination.py": "History pagination at 1M runs",
    "watch_fanout.py": "WatchRun fan-out",
    "quota.py": "Living within a model's quota (two projects, two replicas, the stub's quota)",
    "trigger_admission.py": "TriggerRun admission of one project (runs/s accepted, exact cap)",
    "prune.py": "History retention: pruning old runs while live runs write steps",
}


def _ms(x: float | None) -> str:
    return "" if x is None else f"{x:.2f}"


def area_section(script: str, parsed: Parsed, status: str, seconds: float) -> list[str]:
    lines = [
        f"### {AREAS.get(script, script)}",
        "",
        f"`bench/{script}` — {status}, {seconds:.0f} s",
        "",
    ]
    if parsed.percentiles:
        lines += [
            "| measure | p50 ms | p90 ms | p99 ms | mean ms | n | note |",
            "|---|---|---|---|---|---|---|",
        ]
        for p in parsed.percentiles:
            lines.append(
                f"| {p.label} | {_ms(p.p50)} | {_ms(p.p90)} | {_ms(p.p99)} | {_ms(p.mean)} "
                f"| {p.n or ''} | {p.note} |"
            )
        lines.append("")
    for line, _value, _unit in parsed.rates:
        lines.append(f"- {line}")
    for line in parsed.info:
        lines.append(f"- {line}")
    if parsed.unparsed:
        lines += ["", "Lines the runner could not parse (kept verbatim):", "", "```"]
        lines += [*parsed.unparsed, "```"]
    return [*lines, ""]


def summarize_peers(rounds: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per system: pooled per-step samples over rounds, median throughput and fan-out wall."""
    out: dict[str, dict[str, Any]] = {}
    for system, results in rounds.items():
        steps = [s for r in results for s in r.get("step_s", [])]
        rates = [r["concurrent"]["steps_per_s"] for r in results if "concurrent" in r]
        walls = [w for r in results if "fanout" in r for w in r["fanout"]["wall_s"]]
        cpu = [r["cpu"] for r in results if "cpu" in r]
        out[system] = {
            "rounds": len(results),
            "n_steps": len(steps),
            "step_p50_ms": percentile(steps, 50) * 1000 if steps else None,
            "step_p90_ms": percentile(steps, 90) * 1000 if steps else None,
            "step_p99_ms": percentile(steps, 99) * 1000 if steps else None,
            "single_steps_per_s": 1 / statistics.fmean(steps) if steps else None,
            "concurrent_steps_per_s": statistics.median(rates) if rates else None,
            "agents": results[0].get("concurrent", {}).get("agents") if results else None,
            "fanout_wall_ms": statistics.median(walls) * 1000 if walls else None,
            "children": results[0].get("fanout", {}).get("children") if results else None,
            "persisted": results[0].get("persisted", "") if results else "",
            "pool_size": results[0].get("pool_size") if results else None,
            "concurrency": results[0].get("concurrency") if results else None,
            # Medians over rounds, from /proc: the system's processes and PostgreSQL.
            "cpu_all_ms_per_step": _median(cpu, "all_ms_per_step"),
            "cpu_system_ms_per_step": _median(cpu, "system_ms_per_step"),
            "cpu_postgres_ms_per_step": _median(cpu, "postgres_ms_per_step"),
            "cpu_stub_ms_per_step": _median(cpu, "stub_ms_per_step"),
            "rss_mib": (_median(cpu, "rss_kib") or 0) / 1024,
        }
    return out


def _median(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(values) if values else None


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a and b else "n/a"


def peer_section(
    summary: dict[str, dict[str, Any]], sizes: dict[str, int], server: str = ""
) -> list[str]:
    af = summary.get("agentfleet", {})
    same = ", ".join(
        f"{s}: pool {v['pool_size']}, {v['concurrency']} at once" for s, v in summary.items()
    )
    lines = [
        f"## agentfleet vs google-adk vs LangGraph ({server or 'same PostgreSQL server'})",
        "",
        f"Scripted agent: {sizes['steps']} steps timed per round after one warm-up run (n = "
        f"steps - 1 gaps per round, pooled over {sizes['rounds']} rounds interleaved, one "
        f"system after another), one model call + one tool call per step; "
        f"{sizes['agents']} concurrent agents x {sizes['concurrent_steps']} steps. Every "
        "system's model is the same stub Gemini server in its own process, over HTTP "
        "through google-genai, answering at once. "
        "Timed span of a step: from one tool response reaching the client to the next.",
        "",
        f"Same for every system (pool size, runs at once): {same}.",
        "Event loops, each system's default: agentfleet's executor runs on uvloop "
        "(AGENTFLEET_EVENT_LOOP), its toolpool on asyncio's; adk, langgraph and every "
        "client on asyncio's.",
        "",
        "| system | step p50 ms | p90 | p99 | 1 agent steps/s | "
        f"{sizes['agents']} agents steps/s | step p50 vs agentfleet "
        "| throughput agentfleet / system |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for system, s in summary.items():
        lines.append(
            f"| {system} | {_ms(s['step_p50_ms'])} | {_ms(s['step_p90_ms'])} | "
            f"{_ms(s['step_p99_ms'])} | {s['single_steps_per_s'] or 0:.0f} | "
            f"{s['concurrent_steps_per_s'] or 0:.0f} | "
            f"{_ratio(s['step_p50_ms'], af.get('step_p50_ms'))} | "
            f"{_ratio(af.get('concurrent_steps_per_s'), s['concurrent_steps_per_s'])} |"
        )
    lines += [
        "",
        f"CPU per step over the {sizes['agents']}-agent part, read from /proc (user + system), "
        "medians over rounds; the stub model's CPU apart (it stands for a remote model):",
        "",
        "| system | all processes ms/step | system's processes | PostgreSQL | stub (apart) "
        "| RSS MiB after |",
        "|---|---|---|---|---|---|",
    ]
    for system, s in summary.items():
        lines.append(
            f"| {system} | {_ms(s['cpu_all_ms_per_step'])} | {_ms(s['cpu_system_ms_per_step'])} "
            f"| {_ms(s['cpu_postgres_ms_per_step'])} | {_ms(s['cpu_stub_ms_per_step'])} "
            f"| {s['rss_mib']:.0f} |"
        )
    lines += [
        "",
        f"Fan-out: {sizes['children']} sub-agents in parallel, each answering at once:",
        "",
    ]
    lines += ["| system | how | wall ms (median) |", "|---|---|---|"]
    how = {
        "agentfleet": "spawn_agents: 10 child runs (rows, events, leases) in the executor",
        "adk": "ParallelAgent of LlmAgents, one session",
        "langgraph (sync)": "Send to a child node, checkpointed (awaited)",
        "langgraph (async)": "Send to a child node, checkpointed in the background",
    }
    for system, s in summary.items():
        if s["fanout_wall_ms"] is not None:  # the toolpool-hop variant runs no fan-out
            lines.append(f"| {system} | {how.get(system, '')} | {_ms(s['fanout_wall_ms'])} |")
    lines += ["", "What each system persisted and how the work differs:", ""]
    for system, s in summary.items():
        lines.append(f"- **{system}**: {s['persisted']}")
    lines += [
        "- agentfleet's tool is `get_entity` (a database read) run in the executor's process "
        "by the toolpool's CallTool code (AGENTFLEET_EXECUTOR_BUILTIN_TOOLS=inprocess, the "
        "default), like the peers' in-process functions; `agentfleet (toolpool hop)` sends "
        "it over gRPC to the toolpool process (=toolpool).",
        '- LangGraph `durability="sync"` writes each checkpoint before going on, as '
        "agentfleet and ADK await their commits: it is the headline; `async` (its default) "
        "is shown beside it.",
        "- agentfleet runs executor and toolpool as separate processes; the client follows "
        "the StartRun gRPC stream. ADK and LangGraph run in the client's process.",
        "",
    ]
    return lines


def headlines(
    summary: dict[str, dict[str, Any]],
    parsed: dict[str, Parsed],
    extra: Sequence[str] = (),
) -> list[str]:
    """The headline block (RESULTS and README); ``extra``: floors, the slow-model figures
    and the MISSED / NOT MEASURED target lines, appended as they are."""
    lines = ["## Headline numbers", "", "```"]
    af = summary.get("agentfleet")
    if af:
        lines.append(
            f"agentfleet step (model over HTTP + built-in tool in-process + persistence), CPU "
            f"{_ms(af.get('cpu_all_ms_per_step'))} ms/step all processes: p50 "
            f"{_ms(af['step_p50_ms'])} ms, p99 {_ms(af['step_p99_ms'])} ms"
        )
        lines.append(
            f"agentfleet {af['agents']} concurrent agents: "
            f"{af['concurrent_steps_per_s'] or 0:.0f} steps/s"
        )
        for peer in ("adk", "langgraph (sync)", "langgraph (async)"):
            if peer in summary:
                p = summary[peer]
                lines.append(
                    f"vs {peer}: step p50 {_ms(p['step_p50_ms'])} ms "
                    f"(agentfleet/{peer} = {_ratio(af['step_p50_ms'], p['step_p50_ms'])}), "
                    f"throughput {p['concurrent_steps_per_s'] or 0:.0f} steps/s "
                    f"(agentfleet/{peer} = "
                    f"{_ratio(af['concurrent_steps_per_s'], p['concurrent_steps_per_s'])})"
                )
    hop = summary.get("agentfleet (toolpool hop)")
    if af and hop:
        lines.append(
            f"agentfleet with the built-in tool over the toolpool hop: step p50 "
            f"{_ms(hop['step_p50_ms'])} ms, {hop['concurrent_steps_per_s'] or 0:.0f} steps/s, "
            f"CPU {_ms(hop.get('cpu_all_ms_per_step'))} ms/step all processes"
        )
    for script, wanted in (("toolpool_calltool.py", "sequential"), ("watch_fanout.py", "WatchRun")):
        for p in parsed.get(script, Parsed()).percentiles:
            if wanted in p.label:
                lines.append(f"{p.label.strip()}: p50 {p.p50:.2f} ms, p99 {p.p99:.2f} ms")
    return [*lines, *extra, "```", ""]


def latency_lines(figures: dict[str, Any]) -> list[str]:
    """Headline lines of ``llm_latency.py --json``: one per model delay."""
    lines = []
    for f in figures.get("by_delay", []):
        lines.append(
            f"{f['runs']} runs, model {f['model_delay_s']:g} s, one executor of concurrency "
            f"{f.get('concurrency', f['runs'])}, pool {f.get('pool_size', '?')}: "
            f"{f['steps_per_s']:.0f} steps/s, overhead beyond the model p50 "
            f"{_ms(f['overhead_p50_ms'])} / p99 {_ms(f['overhead_p99_ms'])} ms "
            f"(n={f['overhead_n']}), first event p50 {_ms(f['first_event_p50_ms'])} ms, "
            f"executor CPU {f['executor_cpu_ms_per_step']:.2f} ms/step, "
            f"RSS {f['rss_kib_per_run']:.0f} KiB per in-flight run "
            f"(at most {f.get('runs_in_flight_peak', '?')} in flight at once)"
        )
    return lines
