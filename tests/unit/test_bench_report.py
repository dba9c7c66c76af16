"""The bench report's plumbing: which printed lines become notes, the README's headline
block written from a full run, and the targets of issue #16 flagged when missed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).parents[2] / "bench"
sys.path.insert(0, str(BENCH))

from _parse import parse_output  # noqa: E402
from _results import headlines  # noqa: E402
from _targets import (  # noqa: E402
    HEADLINE_PEER,
    Check,
    checks_table,
    latency_checks,
    missed_lines,
    peer_checks,
    step_cost_checks,
    step_cpu_checks,
    verdict_checks,
)
from run_all import README_END, README_START, source_revision, update_readme  # noqa: E402


def test_context_lines_are_notes_and_figures_are_figures() -> None:
    parsed = parse_output(
        "CallTool get_entity, sequential  p50 2.25 ms  p99 7.78 ms\n"
        "  database round trips: 828 for the run of 200 steps = 4.14 per step\n"
        "all 500 watchers subscribed in   0.61 s\n"
        "something new\n"
    )
    assert [p.label for p in parsed.percentiles] == ["CallTool get_entity, sequential"]
    assert parsed.info == [
        "database round trips: 828 for the run of 200 steps = 4.14 per step",
        "all 500 watchers subscribed in   0.61 s",
    ]
    assert parsed.unparsed == ["something new"]


def test_readme_block_is_replaced_and_the_rest_kept(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n{README_START}\nold numbers\n{README_END}\n\n## Next\n")
    update_readme(
        ["## Headline numbers", "", "```", "step p50 1 ms", "```"], written="d", path=readme
    )
    assert readme.read_text() == (
        f"# x\n\n{README_START}\nFrom `bench/RESULTS.md` (d):\n\n```\nstep p50 1 ms\n```\n"
        f"{README_END}\n\n## Next\n"
    )


def test_readme_without_markers_is_left_alone(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# x\n")
    update_readme(["numbers"], written="d", path=readme)
    assert readme.read_text() == "# x\n"


def _system(step_p50: float, steps_per_s: float, cpu: float) -> dict[str, object]:
    return {
        "step_p50_ms": step_p50,
        "concurrent_steps_per_s": steps_per_s,
        "cpu_all_ms_per_step": cpu,
        "agents": 50,
    }


def test_peer_targets_met_and_missed_are_told_apart() -> None:
    summary = {
        "agentfleet": _system(step_p50=4.0, steps_per_s=300.0, cpu=5.0),
        HEADLINE_PEER: _system(step_p50=5.0, steps_per_s=100.0, cpu=4.0),
        "adk": _system(step_p50=6.0, steps_per_s=250.0, cpu=9.0),
    }
    status = {c.target: c.status for c in peer_checks(summary)}
    assert status == {
        f"step p50 <= {HEADLINE_PEER}": "met",
        "step p50 <= 0.5x adk": "MISSED",  # 4.0 > 3.0
        f"50-agent throughput >= 1.5x {HEADLINE_PEER}": "met",
        "50-agent throughput >= 1.5x adk": "MISSED",  # 300 < 375
        f"CPU per step, all processes <= {HEADLINE_PEER}": "MISSED",  # 5.0 > 4.0
        "CPU per step, all processes <= adk": "met",
    }


def test_a_missing_figure_is_not_measured_not_met() -> None:
    summary = {"agentfleet": _system(step_p50=1.0, steps_per_s=1000.0, cpu=1.0)}
    checks = peer_checks(summary)
    assert {c.status for c in checks} == {"NOT MEASURED"}
    assert len(missed_lines(checks)) == len(checks)


def test_latency_targets_use_the_lesser_limit() -> None:
    figures = {
        "runs": 1000,
        "model_delay_s": 1.0,
        # 2 cores / 4 ms per step = 500 steps/s < 1000 runs / 1 s: 80% of 500 is needed.
        "cores": 2,
        "cpu_s_per_step": 0.004,
        "steps_per_s": 410.0,
        "overhead_p99_ms": 49.0,
        "rss_kib_per_run": 120.0,
        "first_event_p50_ms": 10.0,
        "executor_cpu_ms_per_step": 1.6,
    }
    checks = latency_checks(figures)
    assert [c.status for c in checks] == ["met", "met", "MISSED", "met"]
    assert "vs needed 400.00 steps/s" in checks[0].measured
    assert latency_checks({}) == []


def test_missed_targets_are_flagged_in_the_table_and_the_headline_block(
    tmp_path: Path,
) -> None:
    checks = [Check("a", "1 ms", True), Check("b", "9 ms vs limit 5 ms", False)]
    table = checks_table(checks)
    assert table[2:] == ["| a | 1 ms | met |", "| b | 9 ms vs limit 5 ms | **MISSED** |"]
    block = headlines({}, {}, missed_lines(checks))
    assert "MISSED: b (9 ms vs limit 5 ms)" in block
    readme = tmp_path / "README.md"
    readme.write_text(f"{README_START}\n{README_END}\n")
    update_readme(block, written="d", path=readme)
    assert "MISSED: b (9 ms vs limit 5 ms)" in readme.read_text()


def test_the_step_cpu_target_reads_the_in_memory_part_only() -> None:
    info = [
        "one run, 970 steps measured (5 runs of 200 steps, the first 5 of each skipped as"
        " warm-up):",
        "executor CPU 1.41 ms per step (process time; median of 5 runs, 1.30-2.10); last run:"
        " 1.30 ms per step (process time)",
        "executor CPU 1.62 ms per step (process time)",
        "one run with get_entity over ToolPool gRPC, 194 steps measured (first 5 skipped as"
        " warm-up):",
        "executor CPU 1.91 ms per step (process time); toolpool process 1.55 ms",
    ]
    checks = step_cpu_checks(info)
    assert [c.met for c in checks] == [True, False]
    assert "1.62 ms" in checks[1].measured
    assert step_cpu_checks([], expected=True)[0].status == "NOT MEASURED"
    assert step_cpu_checks([]) == []


def test_results_name_the_commit_they_measured() -> None:
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=BENCH, capture_output=True, text=True
    ).stdout.strip()

    revision = source_revision()

    assert head
    assert revision.startswith(head), (head, revision)


def test_the_bench_outputs_do_not_mark_the_tree_changed(tmp_path: Path) -> None:
    """A full run writes RESULTS.md, the plots and the README block before it names the
    commit: those alone leave the commit unmarked; any other change marks it."""
    (tmp_path / "bench" / "plots").mkdir(parents=True)
    outputs = ("README.md", "bench/RESULTS.md", "bench/plots/a.png")
    for name in (*outputs, "bench/run_all.py"):
        (tmp_path / name).write_text("first\n")
    for args in (("init", "-q"), ("add", "."), ("commit", "-qm", "files")):
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
            cwd=tmp_path,
            check=True,
            capture_output=True,
        )
    for name in outputs:
        (tmp_path / name).write_text("written by the bench\n")
    unmarked = source_revision(tmp_path)
    (tmp_path / "bench" / "run_all.py").write_text("changed\n")
    marked = source_revision(tmp_path)

    assert unmarked != "unknown"
    assert not unmarked.endswith("with uncommitted changes"), unmarked
    assert marked == f"{unmarked} with uncommitted changes"


def test_the_quota_bench_s_own_verdicts_become_flagged_targets() -> None:
    text = "\n".join(
        [
            "quota: n=40+5 runs x 3 calls = 135 calls, Q=20/10s, two replicas, grant 1 s",
            "  failed runs: 0  target 0: ok",
            "  limiter CPU per model call: 0.230 ms (20 grants)  target < 0.2 ms: MISSED",
        ]
    )
    parsed = parse_output(text)
    checks = verdict_checks(
        "quota", [*parsed.info, *parsed.unparsed], issue="issue 31", expected=True
    )
    assert [(c.target, c.met) for c in checks] == [
        ("quota: failed runs 0", True),
        ("quota: limiter CPU per model call < 0.2 ms", False),
    ]
    assert checks[1].measured == "0.230 ms (20 grants)"
    assert "MISSED: quota: limiter CPU per model call < 0.2 ms" in missed_lines(checks)[0]
    assert any(line.startswith("quota: n=") for line in parsed.info)
    # quota.py ran but printed nothing usable: not measured, never a pass.
    (missing,) = verdict_checks("quota", [], issue="issue 31", expected=True)
    assert missing.met is None


def test_the_admission_bench_s_verdicts_become_flagged_targets_and_every_line_is_read() -> None:
    text = "\n".join(
        [
            "machine: x86_64, 2 cores, 24 GiB, Python 3.11.7",
            "trigger admission: one executor process, concurrency 1 (its slot held by a run "
            "whose model call hangs), pool 20; TriggerRun 64 in flight on one channel",
            "phase 1: 300 TriggerRun of one project, 300 accepted in 1.19 s (first sent to last "
            "answered) = 253 runs/s; codes {'OK': 300}",
            "  TriggerRun latency, 64 in flight               p50  216.022 ms   p90  355.678 ms"
            "   p99  466.139 ms   mean  222.680 ms   (n=300)",
            "  floor: one commit                              p50    0.091 ms   p99    0.210 ms"
            "   (n=200) one autocommitted INSERT of one row (asyncpg)",
            "  CPU per accepted run: executor 2.033 ms, PostgreSQL 2.300 ms, this client "
            "0.646 ms = 4.980 ms",
            "  arithmetic for 1000 runs/s: the executor (one process, one core) 2.033 ms x 1000 "
            "= 2.03 core of 1 (its ceiling 492 runs/s)",
            "  database: 300 of the 300 accepted runs queued",
            "phase 2: cap 100, 250 TriggerRun of one project, 64 in flight, in 1.23 s: 100 "
            "accepted, 100 rows queued (100 of them answered), codes {'OK': 100}",
            "targets:",
            "  runs/s accepted at 64 in flight: 253 runs/s (300 in 1.19 s, 300 queued)  "
            "target >= 1000 runs/s, every run queued: MISSED",
            "  queued cap of 100 at 64 in flight: 100 queued, 100 accepted, 150 "
            "RESOURCE_EXHAUSTED of 250, other codes 0  target exactly 100 admitted, the rest "
            "RESOURCE_EXHAUSTED: ok",
        ]
    )
    parsed = parse_output(text)
    assert parsed.unparsed == []
    assert parsed.percentiles[0].label == "TriggerRun latency, 64 in flight"
    checks = {
        c.target: c
        for c in verdict_checks(
            "trigger_admission", parsed.text_lines(), issue="issue 36", expected=True
        )
    }
    assert {target: c.met for target, c in checks.items()} == {
        "trigger_admission: runs/s accepted at 64 in flight >= 1000 runs/s, "
        "every run queued": False,
        "trigger_admission: queued cap of 100 at 64 in flight exactly 100 "
        "admitted, the rest RESOURCE_EXHAUSTED": True,
    }
    rate = next(c for target, c in checks.items() if "runs/s" in target)
    assert rate.measured == "253 runs/s (300 in 1.19 s, 300 queued)"
    (missing,) = verdict_checks("trigger_admission", [], issue="issue 36", expected=True)
    assert missing.met is None


def test_the_prune_bench_s_verdicts_are_read_by_the_same_parser() -> None:
    text = "\n".join(
        [
            "prune: n=20,000 old runs (2,000 in 'other', 14-day retention; the rest 30 days)",
            "  old runs left: 0  target 0: ok",
            "  writers' p99 during the prune: 31.00 ms, without 13.08 ms = 2.37x"
            "  target <= 2x without: MISSED",
        ]
    )
    parsed = parse_output(text)
    assert parsed.unparsed == []
    assert (parsed.percentiles, parsed.rates) == ([], [])
    checks = verdict_checks("prune", parsed.info, issue="issue 36", expected=True)
    assert [(c.target, c.met) for c in checks] == [
        ("prune: old runs left 0", True),
        ("prune: writers' p99 during the prune <= 2x without", False),
    ]
    assert checks[1].measured == "31.00 ms, without 13.08 ms = 2.37x"
    (missing,) = verdict_checks("prune", [], issue="issue 36", expected=True)
    assert (missing.target, missing.met) == ("prune: issue 36's targets", None)


def test_issue_36_step_costs_are_checked_from_the_durable_peers_and_the_scale_out() -> None:
    durable = {"agentfleet": {"cpu_all_ms_per_step": 2.5, "cpu_postgres_ms_per_step": 1.4}}
    scale = {"by_executors": [{"executors": 1, "commits_per_step": 0.55}, {"executors": 2}]}
    checks = step_cost_checks(durable, scale, expected=True)
    assert [c.met for c in checks] == [True, False, True]
    assert checks[2].measured == "0.55 txn/step vs limit 0.60 txn/step"
    # A bench that ran without the figures is NOT MEASURED, never met.
    assert [c.met for c in step_cost_checks({}, {}, expected=True)] == [None, None, None]
    assert step_cost_checks({}, {}, expected=False) == []
