"""``make bench``: every bench script and the peer comparison on one PostgreSQL server,
then bench/RESULTS.md and bench/plots/*.png.

Starts one embedded PostgreSQL (fsync off: the same for every system) and passes its URL
to everything as DATABASE_URL (each script makes and drops its own database there). Runs
every ``bench/*.py`` but the private ones (``_*``), this file and ``watch_fanout.py`` (run
with --json); then the peer rounds, interleaved agentfleet / adk / langgraph; then the
fan-out sizes for the plot. Prints the load average at start and end and each part's time.

``python bench/run_all.py [--quick] [--only a.py,b.py] [--skip x.py]``; peers need
bench/.peers-venv (``make bench`` makes it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.metadata as md
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from _common import interrupt, machine, temporary_folder  # noqa: E402
from _parse import Parsed, parse_output  # noqa: E402
from _results import area_section, headlines, peer_section, summarize_peers  # noqa: E402

from agentfleet import db  # noqa: E402
from agentfleet.embedded_pg import EmbeddedPostgres  # noqa: E402

PEERS_PY = HERE / ".peers-venv" / "bin" / "python"
OWN = {"run_all.py", "watch_fanout.py"}
HEAVY = {"history_pagination.py", "dispatch.py"}  # skipped by --quick: 1M rows, 10k tasks
CLEANUP_GRACE_S = 30.0
"""How long an interrupted benchmark gets to stop its servers and delete its folders."""


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def run(cmd: list[str], env: dict[str, str], timeout_s: float) -> tuple[str, str, float]:
    began = time.perf_counter()
    process = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        stdout, _ = interrupt(process, grace_s=CLEANUP_GRACE_S)
        return f"TIMED OUT after {timeout_s:.0f} s", stdout, time.perf_counter() - began
    except KeyboardInterrupt:
        # The terminal sent the Ctrl-C to the child too: let it clean up before leaving.
        interrupt(process, grace_s=CLEANUP_GRACE_S, send=False)
        raise
    status = "ok" if process.returncode == 0 else f"FAILED (exit {process.returncode})"
    text = stdout + ("" if process.returncode == 0 else "\n" + stderr[-3000:])
    return status, text, time.perf_counter() - began


def versions(url: str) -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in ("grpcio", "google-genai", "asyncpg"):
        out[name] = md.version(name)
    out["PostgreSQL"] = asyncio.run(_server_version(url))
    if PEERS_PY.exists():
        names = [
            "google-adk",
            "langgraph",
            "langgraph-checkpoint-postgres",
            "langchain-core",
            "psycopg",
            "SQLAlchemy",
        ]
        code = (
            "import importlib.metadata as m, json, sys; "
            "print(json.dumps({n: m.version(n) for n in sys.argv[1:]}))"
        )
        done = subprocess.run([str(PEERS_PY), "-c", code, *names], capture_output=True, text=True)
        out.update(json.loads(done.stdout) if done.returncode == 0 else {"peers": "unreadable"})
    return out


async def _server_version(url: str) -> str:
    conn = await db.connect(url)
    try:
        return str(await conn.fetchval("SHOW server_version"))
    finally:
        await conn.close()


def peer_rounds(
    args: argparse.Namespace, env: dict[str, str], out_dir: Path, log: list[str]
) -> dict[str, list[dict[str, Any]]]:
    sizes = [
        "--steps",
        str(args.steps),
        "--agents",
        str(args.agents),
        "--concurrent-steps",
        str(args.concurrent_steps),
        "--children",
        "10",
        "--fanout-repeats",
        str(args.fanout_repeats),
    ]
    systems = [("agentfleet", sys.executable, "agentfleet_scripted.py")]
    if PEERS_PY.exists():
        systems += [
            ("adk", str(PEERS_PY), "adk_scripted.py"),
            ("langgraph", str(PEERS_PY), "langgraph_scripted.py"),
        ]
    else:
        log.append("peers venv missing (bench/.peers-venv): peers not measured")
    results: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in systems}
    for r in range(args.rounds):
        for name, python, script in systems:  # A B C A B C: load drifts hit all alike
            target = out_dir / f"{name}-{r}.json"
            status, text, took = run(
                [python, str(HERE / "peers" / script), *sizes, "--json", str(target)], env, 300
            )
            print(f"  round {r + 1} {name}: {status} in {took:.1f} s", flush=True)
            if target.exists():
                results[name].append(json.loads(target.read_text()))
            else:
                log.append(f"{name} round {r + 1}: {status}\n{text[-1500:]}")
    return results


def fanout_sizes(
    args: argparse.Namespace, env: dict[str, str], out_dir: Path
) -> dict[str, list[list[float]]]:
    lines: dict[str, list[list[float]]] = {}
    systems = [("agentfleet", sys.executable, "agentfleet_scripted.py")]
    if PEERS_PY.exists():
        systems += [
            ("adk", str(PEERS_PY), "adk_scripted.py"),
            ("langgraph", str(PEERS_PY), "langgraph_scripted.py"),
        ]
    for name, python, script in systems:
        for k in args.fanout_sizes:
            target = out_dir / f"fan-{name}-{k}.json"
            run(
                [
                    python,
                    str(HERE / "peers" / script),
                    "--parts",
                    "fanout",
                    "--children",
                    str(k),
                    "--fanout-repeats",
                    "3",
                    "--json",
                    str(target),
                ],
                env,
                300,
            )
            if target.exists():
                walls = sorted(json.loads(target.read_text())["fanout"]["wall_s"])
                lines.setdefault(name, []).append([k, walls[len(walls) // 2] * 1000])
    return lines


def dag_points(parsed: Parsed) -> list[list[float]]:
    points = []
    for line, value, unit in parsed.rates:
        if unit == "ms/task" and "-task DAG" in line:
            points.append([float(line.split("-task")[0].replace(",", "").strip()), value])
    return points


README = ROOT / "README.md"
README_START, README_END = "<!-- bench:start -->", "<!-- bench:end -->"


def update_readme(lines: list[str], *, written: str, path: Path = README) -> None:
    """Puts a full run's headline numbers between the README's bench markers."""
    text = path.read_text()
    head, start, rest = text.partition(README_START)
    _old, end, tail = rest.partition(README_END)
    if not (start and end):
        print(f"README.md has no {README_START} ... {README_END} block; not updated")
        return
    block = [line for line in lines if not line.startswith("## ")]
    body = "\n".join([f"From `bench/RESULTS.md` ({written}):", *block]).strip()
    path.write_text(f"{head}{start}\n{body}\n{end}{tail}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="small sizes; skips " + ", ".join(sorted(HEAVY))
    )
    parser.add_argument("--only", default="", help="comma-separated bench scripts to run")
    parser.add_argument("--skip", default="", help="comma-separated bench scripts to skip")
    parser.add_argument("--no-peers", action="store_true")
    parser.add_argument("--results", type=Path, default=HERE / "RESULTS.md")
    args = parser.parse_args()
    quick = args.quick
    args.rounds, args.steps, args.agents = (1, 10, 10) if quick else (3, 30, 50)
    args.concurrent_steps, args.fanout_repeats = (5, 1) if quick else (10, 3)
    # At most 16: spawn_agents refuses more children per call (coordination.py).
    args.fanout_sizes = [2, 10] if quick else [1, 4, 8, 16]
    watchers, events = (50, 20) if quick else (500, 100)

    start_load, began_all = loadavg(), time.perf_counter()
    print(f"load average at start: {start_load}; machine: {machine()}", flush=True)
    cleanup = contextlib.ExitStack()
    folder = cleanup.enter_context(temporary_folder("agentfleet-bench-all-"))
    server = EmbeddedPostgres(folder / "pg", durable=False)
    # Last in, first out: the server's cluster goes before its folder.
    cleanup.callback(server.remove)
    timings: list[tuple[str, float, str]] = []
    parsed: dict[str, Parsed] = {}
    sections: list[str] = []
    log: list[str] = []
    try:
        url = asyncio.run(server.start(database=None))
        env = {**os.environ, "DATABASE_URL": url, "PYTHONPATH": str(ROOT)}
        out_dir = folder / "out"
        out_dir.mkdir()
        found = versions(url)
        only = {s for s in args.only.split(",") if s}
        skip = {s for s in args.skip.split(",") if s} | (HEAVY if quick and not only else set())
        scripts = sorted(
            p.name for p in HERE.glob("*.py") if not p.name.startswith("_") and p.name not in OWN
        )
        scripts.append("watch_fanout.py")
        for script in scripts:
            if (only and script not in only) or script in skip:
                timings.append((script, 0.0, "skipped"))
                continue
            print(f"== bench/{script}", flush=True)
            cmd = [sys.executable, str(HERE / script)]
            if script == "watch_fanout.py":
                cmd += ["--watchers", str(watchers), "--events", str(events)]
            status, text, took = run(cmd, env, 600)
            print(text.strip()[-2000:], f"\n   -> {status} in {took:.1f} s", flush=True)
            timings.append((script, took, status))
            parsed[script] = parse_output(text if status == "ok" else "")
            if status != "ok":
                parsed[script].unparsed.append(text[-1500:])
            sections += area_section(script, parsed[script], status, took)
        summary: dict[str, Any] = {}
        plot_series: dict[str, Any] = {}
        if not args.no_peers and (not only or "peers" in only):
            print("== peers (interleaved rounds)", flush=True)
            t0 = time.perf_counter()
            summary = summarize_peers(peer_rounds(args, env, out_dir, log))
            timings.append(("peers: interleaved rounds", time.perf_counter() - t0, "ok"))
            t0 = time.perf_counter()
            fan = fanout_sizes(args, env, out_dir)
            timings.append(("peers: fan-out sizes", time.perf_counter() - t0, "ok"))
            if fan:
                plot_series["fanout_children"] = {
                    "title": "Parallel sub-agents: wall time",
                    "xlabel": "children spawned",
                    "ylabel": "ms (median)",
                    "lines": fan,
                }
        dag = dag_points(parsed.get("dispatch.py", Parsed()))
        if dag:
            plot_series["dag_tasks"] = {
                "title": "Dispatcher overhead per task",
                "xlabel": "tasks in the DAG",
                "ylabel": "ms/task",
                "lines": {"agentfleet dispatcher": dag},
            }
        if plot_series and PEERS_PY.exists():
            series = out_dir / "series.json"
            series.write_text(json.dumps(plot_series))
            status, text, _ = run(
                [str(PEERS_PY), str(HERE / "_plots.py"), str(series), str(HERE / "plots")], env, 120
            )
            print(text.strip(), flush=True)
    finally:
        cleanup.close()
    end_load, total = loadavg(), time.perf_counter() - began_all
    doc = [
        "# Benchmark results",
        "",
        f"Written by `make bench` (`bench/run_all.py{' --quick' if quick else ''}`) on "
        f"{time.strftime('%Y-%m-%d %H:%M %Z')}.",
        "",
        f"- machine: {machine()}",
        "- versions: " + ", ".join(f"{k} {v}" for k, v in found.items()),
        f"- load average (1, 5, 15 min) at start {start_load}, at end {end_load} "
        "(other work on the machine slows every system; the rounds are interleaved for that)",
        "- one embedded PostgreSQL server for everything, fsync off (the same for every system)",
        f"- total time {total:.0f} s",
        "",
    ]
    doc += headlines(summary, parsed)
    if summary:
        doc += peer_section(
            summary,
            {
                "steps": args.steps,
                "agents": args.agents,
                "concurrent_steps": args.concurrent_steps,
                "children": 10,
                "rounds": args.rounds,
            },
        )
    doc += ["## Areas", "", *sections]
    if not dag:
        doc.append(
            "- tasks-in-a-DAG plot: no `N-task DAG` lines (dispatch.py not run or not parsed)"
        )
    doc.append(
        "- runs-in-history plot: history_pagination.py measures one size (1M runs); "
        "nothing to plot against size"
    )
    doc += ["", "## Time per part", "", "| part | seconds | status |", "|---|---|---|"]
    doc += [f"| {name} | {took:.1f} | {status} |" for name, took, status in timings]
    if log:
        doc += ["", "## Problems", "", "```", *log, "```"]
    args.results.write_text("\n".join(doc) + "\n")
    full = not (quick or args.only or args.skip or args.no_peers)
    if full and args.results == HERE / "RESULTS.md":
        update_readme(headlines(summary, parsed), written=time.strftime("%Y-%m-%d"))
    print(f"\nwrote {args.results}; load average at end: {end_load}; total {total:.0f} s")
    for name, took, status in timings:
        print(f"  {name:<36} {took:7.1f} s  {status}")


if __name__ == "__main__":
    main()
