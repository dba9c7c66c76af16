"""Circuit breaker of one MCP server: stop hammering a server that keeps failing.

``closed`` lets every call through and counts consecutive failures; at the threshold it
turns ``open`` and rejects calls without trying. After the cool-down it is ``half_open``:
one probe call goes through (others are still rejected); its success closes the breaker,
its failure opens it for another cool-down. Pure logic on an injectable clock.

It also keeps what the console shows of a server's health: when it last succeeded and
failed (wall-clock times) and the last error's text, bounded by the caller.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal

BreakerState = Literal["closed", "open", "half_open"]


class CircuitBreaker:
    """Counts a server's consecutive failures and decides whether a call may proceed."""

    def __init__(
        self,
        *,
        failure_threshold: int = 5,
        cool_down_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        if failure_threshold < 1:
            raise ValueError("failure_threshold must be at least 1")
        self._threshold = failure_threshold
        self._cool_down_s = cool_down_s
        self._clock = clock
        self._failures = 0
        self._opened_at: float | None = None
        self._probing = False
        self._wall_clock = wall_clock
        self.last_success_at: float | None = None
        """Wall-clock time (``time.time``) of the last success; ``None`` if none yet."""
        self.last_failure_at: float | None = None
        self.last_error = ""

    @property
    def state(self) -> BreakerState:
        if self._opened_at is None:
            return "closed"
        if self._clock() - self._opened_at >= self._cool_down_s:
            return "half_open"
        return "open"

    @property
    def consecutive_failures(self) -> int:
        return self._failures

    def retry_after_s(self) -> float:
        """Seconds until a probe is allowed (0 when not open)."""
        if self._opened_at is None:
            return 0.0
        return max(0.0, self._opened_at + self._cool_down_s - self._clock())

    def allow(self) -> bool:
        """Whether a call may proceed now; in ``half_open`` only the first caller (the probe).

        Every allowed call must end with exactly one of :meth:`record_success`,
        :meth:`record_failure` or :meth:`record_neutral`.
        """
        state = self.state
        if state == "closed":
            return True
        if state == "half_open" and not self._probing:
            self._probing = True
            return True
        return False

    def record_success(self) -> None:
        """The server answered: close the breaker and forget past failures."""
        self.last_success_at = self._wall_clock()
        self._failures = 0
        self._opened_at = None
        self._probing = False

    def record_failure(self, error: str = "") -> None:
        """The server could not be reached or timed out (``error``: why, already bounded)."""
        self.note_error(error)
        self._failures += 1
        if self._probing or self._failures >= self._threshold:
            self._opened_at = self._clock()
        self._probing = False

    def record_neutral(self) -> None:
        """The call ended without telling anything about the server (e.g. the caller left)."""
        self._probing = False

    def note_error(self, error: str) -> None:
        """A failure to show that does not count toward opening (an error answer proves the
        server is up): only the last failure's time and text change."""
        self.last_failure_at = self._wall_clock()
        self.last_error = error
