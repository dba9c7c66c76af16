"""RESULTS.md from what run_all.py gathered: a table per area, the peer comparison, headlines."""

from __future__ import annotations

import statistics
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
        }
    return out


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a and b else "n/a"


def peer_section(summary: dict[str, dict[str, Any]], sizes: dict[str, int]) -> list[str]:
    af = summary.get("agentfleet", {})
    lines = [
        "## agentfleet vs google-adk vs LangGraph (same run, same PostgreSQL server)",
        "",
        f"Scripted agent: {sizes['steps']} steps timed per round (one model call + one tool call "
        f"per step), {sizes['agents']} concurrent agents x {sizes['concurrent_steps']} steps, "
        f"rounds interleaved A B C A B C ({sizes['rounds']} rounds). Fake models answer at once.",
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
        f"Fan-out: {sizes['children']} sub-agents in parallel, each answering at once:",
        "",
    ]
    lines += ["| system | how | wall ms (median) |", "|---|---|---|"]
    how = {
        "agentfleet": "spawn_agents: 10 child runs (rows, events, leases) in the executor",
        "adk": "ParallelAgent of LlmAgents, one session",
        "langgraph": "Send to a child node, checkpointed",
    }
    for system, s in summary.items():
        lines.append(f"| {system} | {how.get(system, '')} | {_ms(s['fanout_wall_ms'])} |")
    lines += ["", "What each system persisted and how the work differs:", ""]
    for system, s in summary.items():
        lines.append(f"- **{system}**: {s['persisted']}")
    lines += [
        "- agentfleet's model is the stub Gemini HTTP server (a real HTTP round trip per "
        "step through google-genai); the peers' fake models are Python objects in-process.",
        "- agentfleet's tool is `get_entity` through ToolPool CallTool (gRPC hop + a database "
        "read); the peers' tool is an in-process function.",
        "- agentfleet runs executor and toolpool as separate processes; the client follows "
        "the StartRun gRPC stream. ADK and LangGraph run in the client's process.",
        "",
    ]
    return lines


def headlines(summary: dict[str, dict[str, Any]], parsed: dict[str, Parsed]) -> list[str]:
    lines = ["## Headline numbers", "", "```"]
    af = summary.get("agentfleet")
    if af:
        lines.append(
            f"agentfleet step (model + tool + persistence, over gRPC): p50 "
            f"{_ms(af['step_p50_ms'])} ms, p99 {_ms(af['step_p99_ms'])} ms"
        )
        lines.append(
            f"agentfleet {af['agents']} concurrent agents: "
            f"{af['concurrent_steps_per_s'] or 0:.0f} steps/s"
        )
        for peer in ("adk", "langgraph"):
            if peer in summary:
                p = summary[peer]
                lines.append(
                    f"vs {peer}: step p50 {_ms(p['step_p50_ms'])} ms "
                    f"(agentfleet/{peer} = {_ratio(af['step_p50_ms'], p['step_p50_ms'])}), "
                    f"throughput {p['concurrent_steps_per_s'] or 0:.0f} steps/s "
                    f"(agentfleet/{peer} = "
                    f"{_ratio(af['concurrent_steps_per_s'], p['concurrent_steps_per_s'])})"
                )
    for script, wanted in (("toolpool_calltool.py", "sequential"), ("watch_fanout.py", "WatchRun")):
        for p in parsed.get(script, Parsed()).percentiles:
            if wanted in p.label:
                lines.append(f"{p.label.strip()}: p50 {p.p50:.2f} ms, p99 {p.p99:.2f} ms")
    return [*lines, "```", ""]
