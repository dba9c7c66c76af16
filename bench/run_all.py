"""``make bench``: every bench script and the peer comparison, then bench/RESULTS.md and
bench/plots/*.png.

One stub Gemini server in its own process (``python -m agentfleet.gemini_stub``) is every
system's model. Two embedded PostgreSQL servers, one after the other: **durable** (fsync,
synchronous_commit and full_page_writes on, PostgreSQL's defaults) and **fast** (all three
off); the settings are read back with SHOW and written in RESULTS. On each: the floors
(bare HTTP round trip to the stub, bare gRPC echo, one commit) and the peer rounds,
interleaved agentfleet / adk / langgraph (sync) / langgraph (async), every system on the
same pool size and runs at once. On the durable one also ``scale_out.py`` (NOTIFYing
commits hold a database-wide lock through their WAL flush: the durable server is where
they would serialise). On the fast one every other ``bench/*.py`` but the private ones
(``_*``) and this file, and the fan-out sizes for the plot (one table only). Peer rounds:
3 on the durable server (the headline), 2 on the fast one. Targets of issues #16, #31
and #36 are checked and the missed ones flagged. Prints the load average at start and end and each
part's time.

``python bench/run_all.py [--quick] [--only a.py,b.py] [--skip x.py]``; peers need
bench/.peers-venv (``make bench`` makes it).
"""

from __future__ import annotations

import argparse
import asyncio
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

from _common import interrupt, loadavg, machine, temporary_folder  # noqa: E402
from _floors import floor_headline, floor_lines, measure_floors  # noqa: E402
from _parse import Parsed, parse_output  # noqa: E402
from _peer_rounds import PEERS_PY, fanout_sizes, peer_rounds  # noqa: E402
from _results import (  # noqa: E402
    area_section,
    headlines,
    latency_lines,
    peer_section,
    summarize_peers,
)
from _scale import scale_section  # noqa: E402
from _servers import describe, postgres_facts, stub_process  # noqa: E402
from _targets import (  # noqa: E402
    Check,
    checks_table,
    latency_checks,
    missed_lines,
    peer_checks,
    step_cost_checks,
    step_cpu_checks,
    verdict_checks,
)

from agentfleet.postgres import db  # noqa: E402
from agentfleet.postgres.embedded_pg import EmbeddedPostgres  # noqa: E402

OWN = {"run_all.py", "watch_fanout.py"}
DURABLE = {"scale_out.py"}
"""Area scripts run on the durable server instead of the fast one."""
HEAVY = {"history_pagination.py", "dispatch.py"}  # skipped by --quick: 1M rows, 10k tasks
VERDICTS = {"quota.py": "issue 31", "trigger_admission.py": "issue 36", "prune.py": "issue 36"}
"""Scripts that check their own targets (bench/_targets.verdict_checks reads their lines)."""
CLEANUP_GRACE_S = 30.0
"""How long an interrupted benchmark gets to stop its servers and delete its folders."""


def python_speed_ms() -> float:
    """A fixed pure-Python loop's time, the least of 3 runs: the machine's speed for the
    executor's kind of work at that moment. On a shared machine it moves from hour to hour,
    and every CPU figure of this report moves with it."""
    times = []
    for _ in range(3):
        began = time.process_time()
        total = 0
        for i in range(2_000_000):
            total += i & 7
        times.append((time.process_time() - began) * 1000)
    return min(times)


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


def area_scripts(args: argparse.Namespace) -> list[str]:
    found = sorted(
        p.name
        for p in HERE.glob("*.py")
        if not p.name.startswith("_") and p.name not in OWN | DURABLE
    )
    return [*found, *sorted(OWN - {"run_all.py"})]


def script_command(script: str, args: argparse.Namespace, out_dir: Path) -> list[str]:
    cmd = [sys.executable, str(HERE / script)]
    if script == "watch_fanout.py":
        cmd += ["--watchers", str(args.watchers), "--events", str(args.events)]
    if script in ("llm_latency.py", "scale_out.py"):
        cmd += ["--json", str(out_dir / script.replace(".py", ".json"))]
        cmd += ["--quick"] if args.quick else []
    if script == "quota.py" and args.quick:
        cmd += ["--quick"]  # 30 runs against 20 per 2 s: about 15 s instead of 70
    if script == "trigger_admission.py" and args.quick:
        cmd += ["--quick"]  # 300 runs and a cap of 100 instead of 2,000 and 300
    if script == "prune.py" and args.quick:
        cmd += ["--quick"]  # 20,000 old runs instead of the default: about 20 s
    return cmd


def measure_server(
    label: str, durable: bool, args: argparse.Namespace, ctx: dict[str, Any]
) -> dict[str, Any]:
    """Everything measured on one PostgreSQL server: floors, peers; on the fast one also the
    area scripts and the fan-out sizes (as before: their figures are about agentfleet's code)."""
    folder: Path = ctx["folder"]
    server = EmbeddedPostgres(folder / f"pg-{label}", durable=durable)
    found: dict[str, Any] = {"label": label}
    try:
        url = asyncio.run(server.start(database=None))
        postmaster, settings = asyncio.run(postgres_facts(url))
        found["settings"] = describe(settings)
        print(f"== PostgreSQL {label}: {found['settings']}", flush=True)
        env = {
            **os.environ,
            "DATABASE_URL": url,
            "PYTHONPATH": str(ROOT),
            "BENCH_STUB_URL": ctx["stub"].base_url,
            "BENCH_STUB_PID": str(ctx["stub"].pid),
            "BENCH_POSTGRES_PID": str(postmaster),
            # google-genai (ADK, LangGraph's model) wants a key; the stub takes any.
            "GOOGLE_API_KEY": "bench",
            "GOOGLE_GENAI_USE_VERTEXAI": "false",
        }
        ctx.setdefault("versions", versions(url))
        n, warmup = (200, 20) if args.quick else (2000, 200)
        t0 = time.perf_counter()
        found["floors"] = asyncio.run(measure_floors(url, ctx["stub"].base_url, n, warmup))
        ctx["timings"].append((f"floors ({label})", time.perf_counter() - t0, "ok"))
        run_areas(args, env, ctx, sorted(DURABLE) if durable else area_scripts(args))
        if not args.no_peers and (not args.only or "peers" in args.only):
            print(f"== peers on {label} PostgreSQL (interleaved rounds)", flush=True)
            t0 = time.perf_counter()
            found["rounds"] = args.rounds if durable else args.fast_rounds
            rounds = peer_rounds(args, env, ctx["out_dir"], ctx["log"], run, found["rounds"])
            found["summary"] = summarize_peers(rounds)
            ctx["timings"].append((f"peers ({label})", time.perf_counter() - t0, "ok"))
            if not durable:
                t0 = time.perf_counter()
                ctx["fan"] = fanout_sizes(args, env, ctx["out_dir"], run)
                ctx["timings"].append(("peers: fan-out sizes", time.perf_counter() - t0, "ok"))
    finally:
        server.remove()
    return found


def run_areas(
    args: argparse.Namespace, env: dict[str, str], ctx: dict[str, Any], scripts: list[str]
) -> None:
    only = {s for s in args.only.split(",") if s}
    skip = {s for s in args.skip.split(",") if s} | (HEAVY if args.quick and not only else set())
    for script in scripts:
        if (only and script not in only) or script in skip:
            ctx["timings"].append((script, 0.0, "skipped"))
            continue
        print(f"== bench/{script}", flush=True)
        status, text, took = run(script_command(script, args, ctx["out_dir"]), env, 600)
        print(text.strip()[-2000:], f"\n   -> {status} in {took:.1f} s", flush=True)
        ctx["timings"].append((script, took, status))
        parsed = parse_output(text if status == "ok" else "")
        if status != "ok":
            parsed.unparsed.append(text[-1500:])
        ctx["parsed"][script] = parsed
        if status != "ok" or script not in DURABLE:  # scale_out.py has its own section
            ctx["sections"] += area_section(script, parsed, status, took)


BENCH_OUTPUTS = ("bench/RESULTS.md", "bench/plots", "README.md")
"""What a full run writes in the tree itself (README: its Performance block)."""


def source_revision(root: Path = ROOT) -> str:
    """The commit of the checkout ``root`` measured, marked when the tree had other changes
    than the bench's own outputs (or 'unknown' outside a git checkout): figures compare only
    with the code they ran."""
    outputs = [f":(exclude){path}" for path in BENCH_OUTPUTS]
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True
        )
        changed = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", ".", *outputs],
            cwd=root,
            capture_output=True,
            text=True,
        )
    except OSError:
        return "unknown"
    if head.returncode != 0:
        return "unknown"
    return head.stdout.strip() + (" with uncommitted changes" if changed.stdout.strip() else "")


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
    # Every executor a bench starts is one process whose pid it measures (CPU, RSS); the
    # default, a host of one worker per core, would leave that pid an idle parent.
    os.environ.setdefault("AGENTFLEET_EXECUTOR_PROCESSES", "1")
    quick = args.quick
    args.rounds, args.steps, args.agents = (1, 10, 10) if quick else (3, 60, 50)
    args.fast_rounds = 1 if quick else 2
    args.concurrent_steps, args.fanout_repeats = (5, 1) if quick else (6, 3)
    args.pool_size = 20
    """The same database pool size for every system (agentfleet's executor and toolpool
    each, ADK's SQLAlchemy pool, LangGraph's psycopg pool)."""
    # At most 16: spawn_agents refuses more children per call (coordination.py).
    args.fanout_sizes = [2, 10] if quick else [1, 4, 16]
    args.watchers, args.events = (50, 20) if quick else (500, 100)

    start_load, start_speed, began_all = loadavg(), python_speed_ms(), time.perf_counter()
    print(
        f"load average at start: {start_load}; machine: {machine()}; reference loop "
        f"{start_speed:.0f} ms",
        flush=True,
    )
    ctx: dict[str, Any] = {"timings": [], "parsed": {}, "sections": [], "log": []}
    servers: list[dict[str, Any]] = []
    with temporary_folder("agentfleet-bench-all-") as folder, stub_process() as stub:
        ctx |= {"folder": folder, "stub": stub, "out_dir": folder / "out"}
        ctx["out_dir"].mkdir()
        for label, durable in (("durable", True), ("fast", False)):
            servers.append(measure_server(label, durable, args, ctx))
        parsed: dict[str, Parsed] = ctx["parsed"]
        latency = _json(ctx["out_dir"] / "llm_latency.json")
        ctx["scale"] = _json(ctx["out_dir"] / "scale_out.json")
        dag = dag_points(parsed.get("dispatch.py", Parsed()))
        if full_run(args):  # a partial run leaves the committed plots alone
            plots(ctx.get("fan", {}), dag, ctx["out_dir"])
    end_load, total = loadavg(), time.perf_counter() - began_all
    speeds = (start_speed, python_speed_ms())
    write_results(args, servers, ctx, latency, dag, (start_load, end_load, total), speeds)


def _json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.exists() else {}


def full_run(args: argparse.Namespace) -> bool:
    """Only a full run into bench/RESULTS.md writes the README block and the plots."""
    partial = args.quick or args.only or args.skip or args.no_peers
    return not partial and args.results == HERE / "RESULTS.md"


def plots(fan: dict[str, Any], dag: list[list[float]], out_dir: Path) -> None:
    plot_series: dict[str, Any] = {}
    if fan:
        plot_series["fanout_children"] = {
            "title": "Parallel sub-agents: wall time",
            "xlabel": "children spawned",
            "ylabel": "ms (median)",
            "lines": fan,
        }
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
        cmd = [str(PEERS_PY), str(HERE / "_plots.py"), str(series), str(HERE / "plots")]
        _status, text, _ = run(cmd, dict(os.environ), 120)
        print(text.strip(), flush=True)


def _ran(ctx: dict[str, Any], script: str) -> bool:
    """The script was run (not skipped), whether or not it succeeded."""
    return any(name == script and status != "skipped" for name, _, status in ctx["timings"])


def write_results(
    args: argparse.Namespace,
    servers: list[dict[str, Any]],
    ctx: dict[str, Any],
    latency: dict[str, Any],
    dag: list[list[float]],
    load: tuple[str, str, float],
    speeds: tuple[float, float],
) -> None:
    start_load, end_load, total = load
    checks = [
        Check(f"[{s['label']} PostgreSQL] {c.target}", c.measured, c.met)
        for s in servers
        if s.get("summary")
        for c in peer_checks(s["summary"])
    ]
    checks += step_cpu_checks(
        ctx["parsed"].get("executor_steps.py", Parsed()).info,
        expected=_ran(ctx, "executor_steps.py"),
    )
    durable = next((s for s in servers if s["label"] == "durable"), {})
    checks += step_cost_checks(
        durable.get("summary", {}), ctx.get("scale", {}), expected=_ran(ctx, "scale_out.py")
    )
    checks += latency_checks(latency, expected=_ran(ctx, "llm_latency.py"))
    for script, issue in VERDICTS.items():
        own = ctx["parsed"].get(script, Parsed())
        checks += verdict_checks(
            script.removesuffix(".py"),
            own.text_lines(),
            issue=issue,
            expected=_ran(ctx, script),
        )
    headline = next((s for s in servers if s["label"] == "durable"), servers[0])
    extra = [floor_headline(s["floors"], s["label"]) for s in servers if "floors" in s]
    extra += latency_lines(latency) + missed_lines(checks)
    versions_found = ctx.get("versions", {})
    doc = [
        "# Benchmark results",
        "",
        f"Written by `make bench` (`bench/run_all.py{' --quick' if args.quick else ''}`) on "
        f"{time.strftime('%Y-%m-%d %H:%M %Z')}, at commit {source_revision()}.",
        "",
        f"- machine: {machine()}",
        "- versions: " + ", ".join(f"{k} {v}" for k, v in versions_found.items()),
        f"- load average (1, 5, 15 min) at start {start_load}, at end {end_load} "
        "(other work on the machine slows every system; the rounds are interleaved for that)",
        f"- reference loop (a fixed pure-Python loop, the least of 3 runs) {speeds[0]:.0f} ms "
        f"at start, {speeds[1]:.0f} ms at end: the machine's speed for Python work; every CPU "
        "figure below moves with it between runs on different days",
        "- two embedded PostgreSQL servers, one after the other: "
        + "; ".join(f"**{s['label']}**: {s.get('settings', 'did not start')}" for s in servers)
        + ". The area scripts run on the fast one.",
        f"- database pool size {args.pool_size} for every system; runs at once: "
        f"{args.agents} for every system",
        f"- total time {total:.0f} s",
        "",
    ]
    doc += headlines(headline.get("summary", {}), ctx["parsed"], extra)
    doc += ["## Targets (issues #16, #31 and #36)", "", *checks_table(checks), ""]
    sizes = {
        "steps": args.steps,
        "agents": args.agents,
        "concurrent_steps": args.concurrent_steps,
        "children": 10,
    }
    for s in servers:
        if "floors" in s:
            doc += floor_lines(s["floors"], f"{s['label']} PostgreSQL")
        if s.get("summary"):
            server = f"{s['label']} PostgreSQL: {s['settings']}"
            doc += peer_section(s["summary"], {**sizes, "rounds": s["rounds"]}, server)
    doc += scale_section(ctx.get("scale", {}))
    doc += ["## Areas", "", *ctx["sections"]]
    if not dag:
        doc.append(
            "- tasks-in-a-DAG plot: no `N-task DAG` lines (dispatch.py not run or not parsed)"
        )
    doc += ["", "## Time per part", "", "| part | seconds | status |", "|---|---|---|"]
    doc += [f"| {name} | {took:.1f} | {status} |" for name, took, status in ctx["timings"]]
    if ctx["log"]:
        doc += ["", "## Problems", "", "```", *ctx["log"], "```"]
    args.results.write_text("\n".join(doc) + "\n")
    if full_run(args):
        update_readme(
            headlines(headline.get("summary", {}), ctx["parsed"], extra),
            written=time.strftime("%Y-%m-%d"),
        )
    print(f"\nwrote {args.results}; load average at end: {end_load}; total {total:.0f} s")
    for name, took, status in ctx["timings"]:
        print(f"  {name:<36} {took:7.1f} s  {status}")
    for line in missed_lines(checks):
        print(f"  {line}")


if __name__ == "__main__":
    main()
