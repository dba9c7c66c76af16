"""The sampled gauges stay bounded and honest: past TOP_PROJECTS projects the rest add up as
``other``, and a series that emptied reports 0 once instead of its last count."""

from __future__ import annotations

from agentfleet.observability.metrics import TASK_STATES, TOP_PROJECTS, ObservedState


def test_projects_past_the_top_add_up_as_other() -> None:
    state = ObservedState()
    rows = [(f"p{i:03}", "queued", 1000 - i) for i in range(TOP_PROJECTS + 30)]
    rows.append(("p000", "running", 5))
    state.set_active_runs(rows)
    projects = {project for project, _ in state.active_runs}
    assert len(projects) == TOP_PROJECTS + 1
    assert {"other", "p000"} <= projects
    assert state.active_runs[("other", "queued")] == sum(
        runs for _, _, runs in rows[TOP_PROJECTS:-1]
    )
    assert sum(state.active_runs.values()) == sum(runs for _, _, runs in rows)


def test_an_emptied_series_reports_zero_once_then_goes() -> None:
    state = ObservedState()
    state.set_active_runs([("a", "running", 2), ("b", "queued", 1)])
    state.set_active_runs([("b", "queued", 1)])
    assert state.active_runs == {("a", "running"): 0, ("b", "queued"): 1}
    state.set_active_runs([("b", "queued", 1)])
    assert state.active_runs == {("b", "queued"): 1}


def test_every_task_state_is_reported_even_without_rows() -> None:
    state = ObservedState()
    state.set_tasks([("ready", 3)])
    assert state.tasks == {**dict.fromkeys(TASK_STATES, 0), "ready": 3}
