"""The peer comparison's rounds: every system run as its own process, interleaved A B C D
A B C D so load drifts hit all alike, all on one PostgreSQL server and the shared stub."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PEERS_PY = HERE / ".peers-venv" / "bin" / "python"
HOP = "agentfleet (toolpool hop)"
RunFn = Callable[[list[str], dict[str, str], float], tuple[str, str, float]]


def systems() -> list[tuple[str, str, str, list[str]]]:
    """(name, python, script, extra arguments); LangGraph twice, sync as the headline."""
    # agentfleet's built-in tool in-process (its default) is the like-for-like row: the peers'
    # tools are in-process functions. The toolpool hop is measured beside it.
    found = [
        ("agentfleet", sys.executable, "agentfleet_scripted.py", []),
        (
            HOP,
            sys.executable,
            "agentfleet_scripted.py",
            ["--builtin-tools", "toolpool", "--parts", "single,concurrent"],
        ),
    ]
    if PEERS_PY.exists():
        peers = str(PEERS_PY)
        found += [
            ("adk", peers, "adk_scripted.py", []),
            ("langgraph (sync)", peers, "langgraph_scripted.py", ["--durability", "sync"]),
            ("langgraph (async)", peers, "langgraph_scripted.py", ["--durability", "async"]),
        ]
    return found


def _file_name(system: str) -> str:
    return system.replace(" ", "-").replace("(", "").replace(")", "")


def peer_rounds(
    args: argparse.Namespace,
    env: dict[str, str],
    out_dir: Path,
    log: list[str],
    run: RunFn,
    rounds: int,
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
        "--pool-size",
        str(args.pool_size),
    ]
    found = systems()
    if not PEERS_PY.exists():
        log.append("peers venv missing (bench/.peers-venv): peers not measured")
    results: dict[str, list[dict[str, Any]]] = {name: [] for name, *_ in found}
    for r in range(rounds):
        for name, python, script, extra in found:
            target = out_dir / f"{_file_name(name)}-{r}.json"
            began = time.perf_counter()
            status, text, _ = run(
                [python, str(HERE / "peers" / script), *sizes, *extra, "--json", str(target)],
                env,
                300,
            )
            took = time.perf_counter() - began
            print(f"  round {r + 1} {name}: {status} in {took:.1f} s", flush=True)
            if target.exists():
                results[name].append(json.loads(target.read_text()))
                target.unlink()
            else:
                log.append(f"{name} round {r + 1}: {status}\n{text[-1500:]}")
    return results


def fanout_sizes(
    args: argparse.Namespace, env: dict[str, str], out_dir: Path, run: RunFn
) -> dict[str, list[list[float]]]:
    lines: dict[str, list[list[float]]] = {}
    for name, python, script, extra in systems():
        if name == HOP:
            continue  # the fan-out calls no built-in tool
        for k in args.fanout_sizes:
            target = out_dir / f"fan-{_file_name(name)}-{k}.json"
            cmd = [python, str(HERE / "peers" / script), "--parts", "fanout", *extra]
            cmd += ["--children", str(k), "--fanout-repeats", "3", "--json", str(target)]
            cmd += ["--agents", str(args.agents), "--pool-size", str(args.pool_size)]
            run(cmd, env, 300)
            if target.exists():
                walls = sorted(json.loads(target.read_text())["fanout"]["wall_s"])
                lines.setdefault(name, []).append([k, walls[len(walls) // 2] * 1000])
    return lines
