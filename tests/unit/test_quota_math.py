"""The shared budget's rules (agentfleet.llm.limiter.quota_math) and the fair queue, without I/O."""

from __future__ import annotations

import pytest

from agentfleet.llm.limiter.quota_math import (
    MIN_GRANT_CALLS,
    BudgetState,
    Grant,
    Refused,
    grant_size,
    next_pacific_midnight,
    pacific_day,
    take_grant,
    throttled,
)
from agentfleet.llm.limiter.quota_queue import FairQueue
from agentfleet.settings.quota_settings import ModelLimits, limits_for, parse_model_quotas

RPM_120 = ModelLimits(requests_per_minute=120)  # 2 per second


def grant(state: BudgetState, limits: ModelLimits, calls: int, now: float, **kw: float):
    return take_grant(
        state,
        limits,
        calls=calls,
        tokens_per_call=kw.get("tokens_per_call", 0.0),
        token_debt=kw.get("token_debt", 0.0),
        now=now,
        horizon_s=kw.get("horizon_s", 2.0),
        grant_s=kw.get("grant_s", 10.0),
    )


def test_grants_are_disjoint_evenly_spaced_stretches_of_one_timeline() -> None:
    state, first = grant(BudgetState(), RPM_120, 2, now=1000.0)
    state, second = grant(state, RPM_120, 2, now=1000.1)
    assert isinstance(first, Grant)
    assert isinstance(second, Grant)
    assert first.slot_times() == [1000.0, 1000.5]
    assert second.slot_times() == [1001.0, 1001.5]
    assert state.tat == 1002.0


def test_no_window_of_the_quota_gets_more_than_the_limit_plus_one_grant() -> None:
    # Greedy holders asking as fast as they are allowed, for a minute.
    state, sent, now = BudgetState(), [], 0.0
    while now < 60:
        state, outcome = grant(state, RPM_120, 3, now=now)
        if isinstance(outcome, Grant):
            sent += outcome.slot_times()
        now += 0.05
    for start in [x / 10 for x in range(0, 500)]:
        in_window = [t for t in sent if start <= t < start + 60]
        assert len(in_window) <= 120 + 1


def test_one_grant_is_at_most_grant_s_of_the_rate_or_the_minimum_calls() -> None:
    _, outcome = grant(BudgetState(), RPM_120, 50, now=0.0, grant_s=5.5)
    assert isinstance(outcome, Grant)
    assert outcome.calls == 11
    _, outcome = grant(BudgetState(), RPM_120, 50, now=0.0, grant_s=0.5)
    assert isinstance(outcome, Grant)
    assert outcome.calls == MIN_GRANT_CALLS


def test_a_timeline_reserved_past_the_horizon_is_refused_until_then() -> None:
    state, _ = grant(BudgetState(), RPM_120, 8, now=0.0)  # reserved to t=4
    state, outcome = grant(state, RPM_120, 1, now=0.5, horizon_s=2.0)
    assert outcome == Refused(retry_at=2.0, limit="requests_per_minute")


def test_tokens_stretch_the_grant_and_the_debt_is_paid_by_the_next() -> None:
    limits = ModelLimits(tokens_per_minute=600)  # 10 per second
    state, first = grant(BudgetState(), limits, 2, now=0.0, tokens_per_call=10)
    assert isinstance(first, Grant)
    assert first.slot_times() == [0.0, 1.0]
    _, second = grant(state, limits, 1, now=0.0, tokens_per_call=10, token_debt=30)
    assert isinstance(second, Grant)
    assert second.start == 2.0
    assert second.spacing == 4.0  # its 10 tokens plus the 30 the first calls overspent


def test_the_day_s_requests_refuse_until_pacific_midnight() -> None:
    limits = ModelLimits(requests_per_day=3)
    state, outcome = grant(BudgetState(), limits, 5, now=1_800_000_000.0)
    assert isinstance(outcome, Grant)
    assert outcome.calls == 3
    _, refused = grant(state, limits, 1, now=1_800_000_001.0)
    assert refused == Refused(
        retry_at=next_pacific_midnight(1_800_000_001.0), limit="requests_per_day"
    )


def test_the_pacific_day_is_right_on_both_sides_of_midnight_whatever_was_asked_before() -> None:
    midnight = next_pacific_midnight(1_800_000_001.0)
    # Asked in this order, the day kept from the previous question must never answer.
    for now, day in [
        (midnight - 1, "2027-01-15"),
        (midnight, "2027-01-16"),
        (midnight - 0.001, "2027-01-15"),
        (midnight + 86_399.0, "2027-01-16"),
        (midnight + 86_400.0, "2027-01-17"),
        (midnight - 1, "2027-01-15"),
    ]:
        assert pacific_day(now) == day, now


def test_a_grant_keeps_every_field_of_the_row_it_does_not_change() -> None:
    state = BudgetState(
        tat=10.0,
        blocked_until=5.0,
        day="2027-01-15",
        day_requests=3,
        discovered_rps=None,
        last_decrease=4.0,
        last_throttled=4.5,
        recent_since=9.5,
        recent_calls=2,
        shares={"other": [1.0, 9.9]},
        vclock=1.0,
    )
    after, outcome = grant(state, RPM_120, 2, now=next_pacific_midnight(1_800_000_001.0) - 50)
    assert isinstance(outcome, Grant)
    kept = {f for f in BudgetState.__dataclass_fields__} - {
        "tat",
        "day_requests",
        "recent_since",
        "recent_calls",
        "day",
    }
    assert {f: getattr(after, f) for f in kept} == {f: getattr(state, f) for f in kept}


def test_a_429_blocks_everyone_and_halves_the_found_rate_once_per_episode() -> None:
    none = ModelLimits()
    state, outcome = grant(BudgetState(), none, 40, now=0.0)
    assert isinstance(outcome, Grant)
    assert outcome.spacing == 0.0  # nothing known: no pacing
    lone = throttled(state, none, retry_after_s=1.0, now=8.0)
    assert lone.discovered_rps is None  # a blip only blocks
    assert lone.blocked_until == 9.0
    state = throttled(lone, none, retry_after_s=10.0, now=10.0)
    assert state.blocked_until == 20.0
    assert state.discovered_rps == pytest.approx(40 / 10 / 2)
    again = throttled(state, none, retry_after_s=10.0, now=11.0)  # same episode
    assert again.discovered_rps == state.discovered_rps
    _, refused = grant(again, none, 1, now=12.0, horizon_s=2.0)
    assert refused == Refused(retry_at=19.0, limit="retry_delay")  # blocked to 21
    later = throttled(again, none, retry_after_s=1.0, now=30.0)
    assert later.discovered_rps == pytest.approx(state.discovered_rps / 2)


def test_grant_size_is_one_grant_stretch_of_the_rate() -> None:
    assert grant_size(20.0, wanted=100, grant_s=1.0, unlimited_batch=64) == 20
    assert grant_size(2.0, wanted=100, grant_s=1.0, unlimited_batch=64) == MIN_GRANT_CALLS
    # The minimum stops at MIN_GRANT_MAX_S of a slow rate: 0.5/s -> 2 calls, 0.1/s -> 1.
    assert grant_size(0.5, wanted=100, grant_s=1.0, unlimited_batch=64) == 2
    assert grant_size(0.1, wanted=100, grant_s=1.0, unlimited_batch=64) == 1
    assert grant_size(0.1, wanted=1, grant_s=1.0, unlimited_batch=64) == 1
    assert grant_size(None, wanted=100, grant_s=1.0, unlimited_batch=64) == 64


def test_declared_limits_override_the_tier_per_model() -> None:
    declared = parse_model_quotas("*:rpm=7; gemini-2.5-pro:tpm=99")
    pro = limits_for("gemini-2.5-pro", tier="tier1", declared=declared)
    assert pro == ModelLimits(requests_per_minute=7, tokens_per_minute=99, requests_per_day=10_000)
    assert limits_for("other", tier="off", declared={}) == ModelLimits()
    with pytest.raises(ValueError, match="rpm=x"):
        parse_model_quotas("m:rpm=x")


def test_projects_share_by_weight_and_a_newcomer_is_not_behind_a_backlog() -> None:
    queue: FairQueue[str] = FairQueue({"big": 1.0, "heavy": 2.0})
    for i in range(1000):
        queue.push(f"big-{i}", project="big", age_key=float(i))
    served = [queue.pop() for _ in range(10)]
    queue.push("small-0", project="small", age_key=0.0)
    assert [queue.pop(), queue.pop()].count("small-0") == 1
    for i in range(30):
        queue.push(f"heavy-{i}", project="heavy", age_key=float(i))
    nxt = [queue.pop() for _ in range(30)]
    assert sum(1 for x in nxt if x and x.startswith("heavy")) == 20  # weight 2 of 3
    assert served == [f"big-{i}" for i in range(10)]


def test_within_a_project_the_oldest_run_goes_first_and_removed_items_are_skipped() -> None:
    queue: FairQueue[str] = FairQueue()
    queue.push("new", project="p", age_key=50.0)
    queue.push("old", project="p", age_key=10.0)
    queue.push("gone", project="p", age_key=1.0)
    queue.remove("gone")
    assert len(queue) == 2
    assert [queue.pop(), queue.pop(), queue.pop()] == ["old", "new", None]
