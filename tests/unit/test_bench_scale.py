"""The bench's pure logic around scale-out and limits: wait-event shares, the estimate for N
replicas, the RESULTS section, how many connections WatchRun watchers are spread over, and
a latency run that gave no figures flagged instead of dropped."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).parents[2] / "bench"
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))

from _scale import (  # noqa: E402
    Cluster,
    busy_shares,
    ceilings,
    estimate_lines,
    notify_share,
    scale_section,
)
from _targets import latency_checks  # noqa: E402

from bench.watch_fanout import channel_count  # noqa: E402


def _count(executors: int, steps_per_s: float, waits: dict[str, int]) -> dict[str, Any]:
    return {
        "executors": executors,
        "runs": 200,
        "steps": 1200,
        "statuses": {"completed": 200},
        "steps_per_s": steps_per_s,
        "cpu_all_ms_per_step": 8.0,
        "cpu_executors_ms_per_step": 4.0,
        "cpu_toolpool_ms_per_step": 1.0,
        "cpu_postgres_ms_per_step": 2.0,
        "transactions_per_step": 5.0,
        "notifications_per_step": 3.0,
        "notify_writes_per_step": 2.0,
        "waits": waits,
    }


def _out(*counts: dict[str, Any]) -> dict[str, Any]:
    return {
        "settings": "fsync=on",
        "floor_commit": {"p50_ms": 0.25, "n": 500},
        "concurrency": 256,
        "pool_size": 20,
        "cores": 2,
        "by_executors": list(counts),
    }


def test_wait_shares_and_the_notify_part_of_them() -> None:
    waits = {"CPU": 2, "Lock:object": 5, "LWLock:NotifyQueue": 1, "Lock:advisory": 2}
    assert busy_shares(waits) == {
        "CPU": 0.2,
        "Lock:object": 0.5,
        "LWLock:NotifyQueue": 0.1,
        "Lock:advisory": 0.2,
    }
    assert notify_share(waits) == 0.6
    assert busy_shares({}) == {}
    assert notify_share({}) == 0.0


def test_ceilings_take_the_slower_of_the_clusters_flush_and_this_machines_commit() -> None:
    one = _count(1, 100.0, {})
    found = ceilings(one, floor_ms=0.25, cluster=Cluster())
    # 1 core / 4 ms; 8 cores / 2 ms; one NOTIFYing write per 1 ms flush, 2 per step (the
    # third NOTIFY of a step, sent in a transaction that writes nothing, waits for no flush).
    assert found == {"per_replica": 250.0, "postgres_cpu": 4000.0, "notify_commits": 500.0}
    slow_disk = ceilings(one, floor_ms=4.0, cluster=Cluster())
    assert slow_disk["notify_commits"] == 125.0


def test_serialised_commits_are_named_as_the_limit_and_bound_the_estimate() -> None:
    lines = estimate_lines(
        _out(
            _count(1, 100.0, {"CPU": 6, "Lock:object": 4}),
            _count(2, 105.0, {"CPU": 5, "Lock:object": 5}),
        )
    )
    text = "\n".join(lines)
    assert "2 -> 105 steps/s (1.05x, NOTIFY waits 50% of busy backend time)" in text
    assert "commits serialise on the NOTIFY lock" in text
    assert "an estimate, not a measurement" in text
    assert "up to about 2.0 replicas of 1 core (~500 steps/s), where NOTIFY commits" in text


def test_a_cpu_bound_machine_is_named_as_the_limit() -> None:
    # 2 cores / 8 ms = 250 steps/s; 240 is within 80% of it, and no NOTIFY waits.
    text = "\n".join(estimate_lines(_out(_count(1, 240.0, {"CPU": 10}))))
    assert "this machine's 2 cores" in text
    assert "NOTIFY lock" not in text


def test_every_limit_met_at_once_is_named() -> None:
    waits = {"CPU": 2, "Lock:object": 4, "Lock:advisory": 4}
    (limit,) = [line for line in estimate_lines(_out(_count(1, 240.0, waits))) if "limits" in line]
    assert "2 cores" in limit
    assert "serialise on the NOTIFY lock (up to 40%" in limit
    assert "Lock:advisory up to 40%" in limit


def test_no_limit_met_is_said_so() -> None:
    (limit,) = [
        line for line in estimate_lines(_out(_count(1, 50.0, {"CPU": 1}))) if "limits" in line
    ]
    assert "neither the cores (250 steps/s) nor a lock" in limit


def test_the_results_section_has_a_row_per_executor_count() -> None:
    section = scale_section(
        _out(_count(1, 100.0, {"CPU": 1}), _count(3, 150.0, {"Lock:object": 1}))
    )
    rows = [line for line in section if line.startswith("| 1 |") or line.startswith("| 3 |")]
    assert len(rows) == 2
    assert rows[1].startswith("| 3 | 1200 | 150 | 1.50x |")
    assert "Lock:object 100%" in rows[1]
    assert scale_section({}) == []


def test_watchers_are_spread_under_half_the_per_connection_stream_limit() -> None:
    assert channel_count(500, 100) == 10
    assert channel_count(50, 100) == 8  # never fewer than 8
    assert channel_count(1000, 100) == 20
    assert channel_count(10, 1) == 10


def test_a_latency_run_without_figures_is_flagged_when_it_was_expected() -> None:
    assert latency_checks({}) == []
    (missing,) = latency_checks({}, expected=True)
    assert missing.status == "NOT MEASURED"
