"""One model's budget in one process: the slots granted to it from the shared budget, the
calls waiting for one, and the refill that asks PostgreSQL for the next grant. Used by
:class:`agentfleet.llm.limiter.quota.ModelQuotas` (one per model); the design: docs/DESIGN.md,
"Model quotas, costs and budgets"."""

from __future__ import annotations

import asyncio
import collections
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from agentfleet.llm.errors import QuotaWaitExceeded, QuotaWaitTooLong
from agentfleet.llm.limiter.quota_math import Grant, grant_size, rates
from agentfleet.llm.limiter.quota_queue import FairQueue
from agentfleet.llm.limiter.quota_shares import MAX_WANTED_PROJECTS
from agentfleet.settings.quota_settings import ModelLimits

if TYPE_CHECKING:
    from agentfleet.llm.limiter.quota import ModelQuotas, QuotaConfig

_log = structlog.get_logger(__name__)

UNLIMITED_BATCH = 64
"""Slots one grant gives while no rate is known."""
FIRST_TOKENS_PER_CALL = 1000.0
"""What a call is charged for before this process has seen one answer of the model."""
HORIZON_S = 60.0
"""A grant is refused while the timeline is reserved further ahead than this (many
processes at once on a slow quota): the process asks again when it is not."""
DB_RETRY_S = 1.0
"""After a failed grant (database unreachable), how long before asking again."""


@dataclass(slots=True)
class Slot:
    """Permission for one call; give it back with :meth:`ModelQuotas.release`."""

    at: float
    """Loop time from which it may be used."""
    expires: float
    tokens: float
    """What its grant charged for the call's tokens."""
    model: str = ""
    project: str = ""
    """The project the shared budget granted it for (:mod:`.quota_shares`); "" any."""


@dataclass(eq=False, slots=True)
class Waiter:
    future: asyncio.Future[Slot]
    project: str
    fallback_at: float | None = None
    """Loop time past which the call would rather go to its fallback model (None: it
    has none): it is sent there as soon as its expected turn passes this."""


class ModelBudget:
    """One model's slots and waiting calls in this process."""

    def __init__(self, owner: ModelQuotas, model: str, limits: ModelLimits) -> None:
        self._owner = owner
        self.model = model
        self.limits = limits
        self.queue: FairQueue[Waiter] = FairQueue(owner.config.weights)
        self.stock: collections.deque[Slot] = collections.deque()
        self.in_flight = 0
        self.rps: float | None = None
        self.limit = "requests_per_minute"
        self.retry_at = 0.0
        self.token_debt = 0.0
        self.tokens_per_call = FIRST_TOKENS_PER_CALL
        self.arrivals: collections.deque[tuple[float, str]] = collections.deque()
        """(time, project) of the calls that asked in the last grant length."""
        self.refill: asyncio.Task[None] | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.timer_at = 0.0
        self.fatal: str | None = None
        """Why every waiting call fails at once (the day's requests spent past max wait)."""
        self.frees_at = 0.0
        """When a refused grant's budget frees (loop time), for the expected wait."""
        self.bounded: set[Waiter] = set()
        """Waiting calls with a fallback model, checked when the expected wait changes."""
        self.share_debt: collections.Counter[str] = collections.Counter()
        """Calls per project used beyond (or below) what grants charged it, for the next
        grant to settle (:func:`~agentfleet.llm.limiter.quota_shares.settle`)."""

    def take_due(self, now: float, project: str) -> Slot | None:
        """A slot usable now when nobody waits ahead (the call goes without waiting)."""
        arrivals, stock = self.arrivals, self.stock
        arrivals.append((now, project))
        grant_s = self._owner.config.grant_s
        while arrivals[0][0] < now - grant_s:
            arrivals.popleft()
        while stock and stock[0].expires < now:
            stock.popleft()
        if len(self.queue) or not stock or stock[0].at > now:
            return None
        cap = self.limits.concurrent_calls
        if cap is not None and self.in_flight >= cap:
            return None
        self.in_flight += 1
        slot = stock.popleft()
        if slot.project != project and slot.project:
            self._moved(slot, project)
        if len(stock) < len(arrivals) and (not stock or stock[-1].at - now <= grant_s):
            self._start_refill()
        return slot

    def expected_wait(self, now: float, project: str) -> float:
        due = self.stock[0].at if self.stock else max(self.retry_at, self.frees_at)
        ahead = min(len(self.queue), self.queue.waiting_in(project) * self.queue.active_projects())
        per_call = 1 / self.rps if self.rps else 0.0
        return max(0.0, due - now) + max(0, ahead - len(self.stock)) * per_call

    def pump(self, woken_for: float = 0.0) -> None:
        """Hands due slots to the next waiters; arms the next wake-up or refill.
        ``woken_for``: the time the timer that runs it was armed for."""
        # Runs for every call that waits (when it queues, and when its slot comes due):
        # kept to locals and inline checks, which is most of its cost.
        loop = asyncio.get_running_loop()
        # The loop ran the timer: its time has come, even when the loop's clock reads a
        # little less (uvloop's counts whole milliseconds and rounds the delay, so it often
        # wakes a fraction of a millisecond "early"; waiting for the clock to agree re-armed
        # the timer for that fraction, about 20 wake-ups per slot, busy, until it did).
        now = max(loop.time(), woken_for)
        stock, queue = self.stock, self.queue
        while stock and stock[0].expires < now:
            stock.popleft()
        if self.fatal is not None:
            while (waiter := queue.pop()) is not None:
                if not waiter.future.done():
                    waiter.future.set_exception(QuotaWaitExceeded(self.fatal))
            self.fatal = None
        cap = self.limits.concurrent_calls
        while len(queue) and stock and stock[0].at <= now:
            if cap is not None and self.in_flight >= cap:
                break
            waiter = queue.pop()
            if waiter is None or waiter.future.done():
                continue
            self.in_flight += 1
            slot = stock.popleft()
            if slot.project != waiter.project and slot.project:
                self._moved(slot, waiter.project)
            waiter.future.set_result(slot)
        waiting = len(queue)
        if not waiting:
            return
        wake = stock[0].at if stock else None
        # One grant ahead at most: a process never reserves the timeline far past what it
        # is about to use, so another process's next grant is never far off.
        if (
            self.refill is None
            and len(stock) < waiting
            and (not stock or stock[-1].at - now <= self._owner.config.grant_s)
        ):
            if now >= self.retry_at:
                self._start_refill()
            else:
                wake = self.retry_at if wake is None else min(wake, self.retry_at)
        if wake is not None and wake > now and wake != self.timer_at:
            if self.timer is not None:
                self.timer.cancel()
            self.timer, self.timer_at = loop.call_at(wake, self._wake), wake

    def _wake(self) -> None:
        woken_for = self.timer_at
        self.timer, self.timer_at = None, 0.0
        self.pump(woken_for)

    def shed_bounded(self, now: float) -> None:
        """Sends each waiting call with a fallback whose expected turn now passes its
        bound to the fallback (:class:`QuotaWaitTooLong`); run when the budget learns
        something new (a grant, a refusal, a 429)."""
        for waiter in list(self.bounded):
            if waiter.future.done() or waiter.fallback_at is None:
                continue
            expected = self.expected_wait(now, waiter.project)
            if now + expected > waiter.fallback_at:
                self.queue.remove(waiter)
                waiter.future.set_exception(self.too_long(expected, waiter.fallback_at - now))

    def too_long(self, expected_s: float, bound_s: float) -> QuotaWaitTooLong:
        return QuotaWaitTooLong(
            f"model quota: {self.model} ({self.limit}) expects a wait of about "
            f"{expected_s:.0f} s, past the {max(0.0, bound_s):.0f} s this call waits before "
            "its fallback model",
            expected_wait_s=expected_s,
        )

    def give_back(self, slot: Slot) -> None:
        self.in_flight -= 1
        self.stock.appendleft(slot)
        self.pump()

    def _moved(self, slot: Slot, project: str) -> None:
        """``slot``, granted for another project, went to a call of ``project``: the local
        queue's order decides (a newcomer's first call goes within a round here too), and
        the next grant moves its charge to the one that used it, so the shared virtual
        times count what each project really used."""
        self.share_debt[project] += 1
        self.share_debt[slot.project] -= 1

    def _wants(self) -> dict[str, int]:
        """Calls wanted per project: those waiting and those that asked in the last grant
        length (about as many will come), less the slots held for it; at most
        MAX_WANTED_PROJECTS projects, the most wanting."""
        wants = collections.Counter(self.queue.waiting())
        wants.update(project for _, project in self.arrivals)
        wants.subtract(slot.project for slot in self.stock)
        wanted = {p: n for p, n in wants.most_common(MAX_WANTED_PROJECTS) if n > 0}
        if not wanted:
            # Asked ahead of demand (slots cover what waits): for the last caller's project.
            wanted = {self.arrivals[-1][1] if self.arrivals else "": 1}
        return wanted

    def _start_refill(self) -> None:
        if self.refill is None and not self._owner.closed:
            self.refill = asyncio.get_running_loop().create_task(self._refill())

    async def _refill(self) -> None:
        loop = asyncio.get_running_loop()
        config = self._owner.config
        try:
            wants = self._wants()
            moved = {p: n for p, n in self.share_debt.most_common() if n}
            size = grant_size(
                self.rps,
                wanted=sum(wants.values()),
                grant_s=config.grant_s,
                unlimited_batch=UNLIMITED_BATCH,
            )
            debt = self.token_debt
            db_now, state, outcome = await self._owner.store.grant(
                self.model,
                self.limits,
                calls=size,
                tokens_per_call=self.tokens_per_call,
                token_debt=debt,
                horizon_s=grant_horizon(config),
                grant_s=config.grant_s,
                headroom=config.headroom,
                wants=wants,
                weights={p: w for p, w in config.weights.items() if p in wants or p in moved},
                share_debt=moved,
            )
            self.share_debt.subtract(moved)
            offset = loop.time() - db_now
            self.rps, _ = rates(self.limits, state, headroom=config.headroom)
            self._owner.granted_rounds += 1
            if isinstance(outcome, Grant):
                self.token_debt -= debt
                self.retry_at = self.frees_at = 0.0
                self.limit = (
                    "retry_delay"
                    if state.blocked_until > db_now
                    else "requests_per_minute"
                    if self.rps is not None
                    else "tokens_per_minute"
                )
                tags = outcome.tags or ("",) * outcome.calls
                for at, project in zip(outcome.slot_times(), tags, strict=True):
                    self.stock.append(
                        Slot(
                            at=at + offset,
                            expires=at + offset + outcome.valid_s,
                            tokens=outcome.tokens_per_call,
                            model=self.model,
                            project=project,
                        )
                    )
            else:
                self.retry_at = outcome.retry_at + offset
                self.limit = outcome.limit
                # Refused because the timeline (or a block) reaches past the horizon: it
                # frees a horizon after the retry; a spent day frees at the retry itself.
                # (A fair-share refusal frees at the retry: the others are back in step.)
                near = outcome.limit in ("requests_per_day", "fair_share")
                ahead = 0.0 if near else grant_horizon(config)
                self.frees_at = self.retry_at + ahead
                if outcome.retry_at - db_now > config.max_wait_s:
                    self.fatal = (
                        f"model quota: {self.model} {outcome.limit} spent; it frees in "
                        f"{outcome.retry_at - db_now:.0f} s, past the maximum wait of "
                        f"{config.max_wait_s:g} s (AGENTFLEET_MODEL_QUOTA_MAX_WAIT_S)"
                    )
        except Exception as exc:  # the database is away: keep the waiters, ask again later
            _log.warning("model quota grant failed", model=self.model, error=repr(exc))
            self.retry_at = loop.time() + DB_RETRY_S
        finally:
            self.refill = None
            if not self._owner.closed:
                if self.bounded:
                    self.shed_bounded(loop.time())
                self.pump()


def grant_horizon(config: QuotaConfig) -> float:
    return max(HORIZON_S, 4 * config.grant_s)
