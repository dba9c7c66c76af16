"""The MCP circuit breaker on a fake clock."""

from __future__ import annotations

from services.toolpool.mcp import CircuitBreaker


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_opens_after_consecutive_failures_and_rejects_while_open() -> None:
    clock = Clock()
    breaker = CircuitBreaker(failure_threshold=3, cool_down_s=10, clock=clock)
    for _ in range(2):
        assert breaker.allow()
        breaker.record_failure()
    assert breaker.state == "closed"
    assert breaker.allow()
    breaker.record_failure()
    assert breaker.state == "open"
    assert not breaker.allow()
    assert breaker.retry_after_s() == 10


def test_a_success_resets_the_count() -> None:
    breaker = CircuitBreaker(failure_threshold=2, cool_down_s=10, clock=Clock())
    breaker.record_failure()
    breaker.record_success()
    breaker.record_failure()
    assert breaker.state == "closed"


def test_half_open_admits_one_probe_whose_success_closes() -> None:
    clock = Clock()
    breaker = CircuitBreaker(failure_threshold=1, cool_down_s=10, clock=clock)
    breaker.record_failure()
    clock.now += 10
    assert breaker.state == "half_open"
    assert breaker.allow()
    assert not breaker.allow()  # the probe is in flight
    breaker.record_success()
    assert breaker.state == "closed"
    assert breaker.allow()


def test_failed_probe_opens_for_another_cool_down() -> None:
    clock = Clock()
    breaker = CircuitBreaker(failure_threshold=5, cool_down_s=10, clock=clock)
    for _ in range(5):
        breaker.record_failure()
    clock.now += 10
    assert breaker.allow()
    breaker.record_failure()
    assert breaker.state == "open"
    clock.now += 9.9
    assert not breaker.allow()


def test_neutral_end_of_probe_lets_another_probe_through() -> None:
    clock = Clock()
    breaker = CircuitBreaker(failure_threshold=1, cool_down_s=1, clock=clock)
    breaker.record_failure()
    clock.now += 1
    assert breaker.allow()
    breaker.record_neutral()
    assert breaker.allow()
