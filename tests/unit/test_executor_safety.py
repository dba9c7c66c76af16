"""The pure safety decisions: limits, budgets, the doom-loop detector and call screening."""

from __future__ import annotations

from google.genai import types

from agentfleet.run_limits import MAX_TOTAL_STEPS
from services.executor.calls import PlannedCall
from services.executor.safety import (
    DoomLoopDetector,
    StepBudget,
    canonical_call,
    effective_max_steps,
    effective_timeout_s,
    resume_budget_error,
    screen_calls,
)


def test_step_limit_precedence() -> None:
    assert effective_max_steps(requested=7, definition=20, depth=1) == 7
    assert effective_max_steps(requested=None, definition=20, depth=1) == 20
    assert effective_max_steps(requested=None, definition=None, depth=1) == 50
    assert effective_max_steps(requested=None, definition=None, depth=0) is None


def test_timeout_precedence() -> None:
    assert effective_timeout_s(requested=5.0, definition=60.0) == 5.0
    assert effective_timeout_s(requested=None, definition=60.0) == 60.0
    assert effective_timeout_s(requested=None, definition=None) is None


def test_budget_stops_at_the_run_limit_and_at_the_global_cap() -> None:
    budget = StepBudget(max_steps=3, total_steps_at_start=0)
    assert budget.exhausted(step_count=2, total_steps=2) is None
    assert budget.exhausted(step_count=3, total_steps=3) == "step_limit"
    unlimited = StepBudget(max_steps=None, total_steps_at_start=490)
    assert unlimited.exhausted(step_count=9, total_steps=499) is None
    assert unlimited.exhausted(step_count=10, total_steps=MAX_TOTAL_STEPS) == "total_step_cap"


def test_resume_budget() -> None:
    assert resume_budget_error(total_steps=100, requested_max_steps=None) is None
    assert resume_budget_error(total_steps=490, requested_max_steps=10) is None
    assert "past MAX_TOTAL_STEPS" in (
        resume_budget_error(total_steps=490, requested_max_steps=11) or ""
    )
    assert "cannot be resumed" in (
        resume_budget_error(total_steps=500, requested_max_steps=None) or ""
    )


def test_canonical_call_ignores_key_order_and_spacing() -> None:
    assert canonical_call("t", {"a": 1, "b": [1, 2]}) == canonical_call("t", {"b": [1, 2], "a": 1})
    assert canonical_call("t", {"a": 1}) != canonical_call("u", {"a": 1})
    assert canonical_call("t", {"a": 1}) != canonical_call("t", {"a": "1"})


def test_detector_warns_on_third_and_fourth_and_stops_on_fifth() -> None:
    detector = DoomLoopDetector()
    verdicts = [detector.observe("t", {"x": 1}) for _ in range(5)]
    assert verdicts == ["run", "run", "warn", "warn", "stop"]


def test_a_different_call_resets_the_count_to_one() -> None:
    detector = DoomLoopDetector()
    for _ in range(3):
        detector.observe("t", {"x": 1})
    assert detector.observe("t", {"x": 2}) == "run"
    assert detector.count == 1
    assert [detector.observe("t", {"x": 1}) for _ in range(3)] == ["run", "run", "warn"]


def _planned(name: str, args: dict) -> PlannedCall:  # type: ignore[type-arg]
    return PlannedCall(
        tool_call_id=f"id-{name}-{args}",
        tool_name=name,
        arguments=args,
        source="builtin",
        call=types.FunctionCall(name=name, args=args),
    )


def test_screening_refuses_the_warned_call_and_everything_in_a_stopping_reply() -> None:
    detector = DoomLoopDetector()
    first = screen_calls([_planned("t", {"a": 1})] * 3, detector, agent_name="x", step=1)
    assert [c.refusal is None for c in first.calls] == [True, True, False]
    assert "different approach" in (first.calls[2].refusal or "")
    assert [e.kind for e in first.safety_events] == ["doom_loop_warning"]
    assert first.stop_error is None
    second = screen_calls([_planned("t", {"a": 1})] * 2, detector, agent_name="x", step=2)
    assert "doom loop" in (second.stop_error or "")
    assert all(c.refusal for c in second.calls)
    assert [e.kind for e in second.safety_events] == ["doom_loop_warning", "doom_loop_stop"]
