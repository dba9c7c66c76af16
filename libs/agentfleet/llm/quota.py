"""The shared model limiter: every model call of a process takes a slot of its model's
budget first; slots come from grants of the budget shared through PostgreSQL.

One :class:`ModelQuotas` per process (executor, dispatcher), one :class:`_Budget` in it per
model. A call that finds a slot due takes it without any I/O; otherwise it waits in the
budget's :class:`~agentfleet.llm.quota_queue.FairQueue` (fair between projects, oldest run
first) on a future, holding no database connection, while one refill task at a time asks
:class:`~agentfleet.llm.quota_store.BudgetStore` for the next grant, sized to what waits and
to the calls of the last grant's length. A 429 blocks the shared budget for its
``retryDelay`` (every process sees it at its next grant) and drops this process's unused
slots; the call then waits again, its retries untouched. A call waits at most
``max_wait_s`` in all, then fails with :class:`~agentfleet.llm.errors.QuotaWaitExceeded`
naming the model and the limit. The design and its bounds: docs/DESIGN.md, "Model quotas,
costs and budgets".
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

import asyncpg
import structlog

from agentfleet.config import Settings
from agentfleet.llm.errors import QuotaWaitExceeded, QuotaWaitTooLong
from agentfleet.llm.quota_math import Grant, grant_size, rates
from agentfleet.llm.quota_queue import FairQueue
from agentfleet.llm.quota_shares import MAX_WANTED_PROJECTS
from agentfleet.llm.quota_store import BudgetStore
from agentfleet.llm.quota_wait import QuotaScope, QuotaWait, QuotaWaitSink
from agentfleet.observability import metrics
from agentfleet.quota_settings import ModelLimits, limits_for

_log = structlog.get_logger(__name__)
T = TypeVar("T")

UNLIMITED_BATCH = 64
"""Slots one grant gives while no rate is known."""
FIRST_TOKENS_PER_CALL = 1000.0
"""What a call is charged for before this process has seen one answer of the model."""
HORIZON_S = 60.0
"""A grant is refused while the timeline is reserved further ahead than this (many
processes at once on a slow quota): the process asks again when it is not."""
DB_RETRY_S = 1.0
"""After a failed grant (database unreachable), how long before asking again."""
WAIT_SHOWN_AFTER_S = 0.5
"""A call's wait for a slot is told to its run (``on_wait``) once it lasts this long."""


@dataclass(frozen=True, kw_only=True, slots=True)
class QuotaConfig:
    tier: str = "off"
    declared: Mapping[str, ModelLimits] = field(default_factory=dict)
    weights: Mapping[str, float] = field(default_factory=dict)
    max_wait_s: float = 600.0
    grant_s: float = 1.0
    headroom: float = 0.95

    @classmethod
    def from_settings(cls, settings: Settings) -> QuotaConfig:
        return cls(
            tier=settings.model_quota_tier,
            declared=settings.model_quotas,
            weights=settings.model_quota_weights,
            max_wait_s=settings.model_quota_max_wait_s,
            grant_s=settings.model_quota_grant_s,
            headroom=settings.model_quota_headroom,
        )


def credential_of(settings: Settings) -> str:
    """Which budget a process's calls share: a digest of the API key (or the Vertex
    project and location, or the base URL), so processes on one key share one budget."""
    if settings.gemini_base_url is not None:
        identity = f"url:{settings.gemini_base_url}:{settings.gemini_api_key or ''}"
    elif settings.gemini_use_vertex and settings.google_cloud_project is not None:
        identity = f"vertex:{settings.google_cloud_project}:{settings.google_cloud_location}"
    else:
        identity = f"key:{settings.gemini_api_key or ''}"
    return hashlib.sha256(identity.encode()).hexdigest()[:16]


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
class _Waiter:
    future: asyncio.Future[Slot]
    project: str
    fallback_at: float | None = None
    """Loop time past which the call would rather go to its fallback model (None: it
    has none): it is sent there as soon as its expected turn passes this."""


class _Budget:
    """One model's slots and waiting calls in this process."""

    def __init__(self, owner: ModelQuotas, model: str, limits: ModelLimits) -> None:
        self._owner = owner
        self.model = model
        self.limits = limits
        self.queue: FairQueue[_Waiter] = FairQueue(owner.config.weights)
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
        self.bounded: set[_Waiter] = set()
        """Waiting calls with a fallback model, checked when the expected wait changes."""
        self.share_debt: collections.Counter[str] = collections.Counter()
        """Calls per project used beyond (or below) what grants charged it, for the next
        grant to settle (:func:`~agentfleet.llm.quota_shares.settle`)."""
        """Waiting calls with a fallback model, checked when the expected wait changes."""

    def take_due(self, now: float, project: str) -> Slot | None:
        """A slot usable now when nobody waits ahead (the call goes without waiting)."""
        self.arrivals.append((now, project))
        while self.arrivals[0][0] < now - self._owner.config.grant_s:
            self.arrivals.popleft()
        self._drop_expired(now)
        if len(self.queue) or not self.stock or self.stock[0].at > now or not self._free():
            return None
        self.in_flight += 1
        slot = self._handed(self.stock.popleft(), project)
        if len(self.stock) < len(self.arrivals) and (
            not self.stock or self.stock[-1].at - now <= self._owner.config.grant_s
        ):
            self._start_refill()
        return slot

    def expected_wait(self, now: float, project: str) -> float:
        due = self.stock[0].at if self.stock else max(self.retry_at, self.frees_at)
        ahead = min(len(self.queue), self.queue.waiting_in(project) * self.queue.active_projects())
        per_call = 1 / self.rps if self.rps else 0.0
        return max(0.0, due - now) + max(0, ahead - len(self.stock)) * per_call

    def pump(self) -> None:
        """Hands due slots to the next waiters; arms the next wake-up or refill."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        self._drop_expired(now)
        if self.fatal is not None:
            while (waiter := self.queue.pop()) is not None:
                if not waiter.future.done():
                    waiter.future.set_exception(QuotaWaitExceeded(self.fatal))
            self.fatal = None
        while len(self.queue) and self.stock and self.stock[0].at <= now and self._free():
            waiter = self.queue.pop()
            if waiter is None or waiter.future.done():
                continue
            self.in_flight += 1
            waiter.future.set_result(self._handed(self.stock.popleft(), waiter.project))
        if not len(self.queue):
            return
        wake = self.stock[0].at if self.stock else None
        # One grant ahead at most: a process never reserves the timeline far past what it
        # is about to use, so another process's next grant is never far off.
        ahead = self.stock[-1].at - now if self.stock else 0.0
        wants_more = len(self.stock) < len(self.queue) and ahead <= self._owner.config.grant_s
        if wants_more and self.refill is None:
            if now >= self.retry_at:
                self._start_refill()
            else:
                wake = self.retry_at if wake is None else min(wake, self.retry_at)
        if wake is not None and wake > now and wake != self.timer_at:
            if self.timer is not None:
                self.timer.cancel()
            self.timer, self.timer_at = loop.call_at(wake, self._wake), wake

    def _wake(self) -> None:
        self.timer, self.timer_at = None, 0.0
        self.pump()

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

    def _free(self) -> bool:
        cap = self.limits.concurrent_calls
        return cap is None or self.in_flight < cap

    def _drop_expired(self, now: float) -> None:
        while self.stock and self.stock[0].expires < now:
            self.stock.popleft()

    def _handed(self, slot: Slot, project: str) -> Slot:
        """``slot`` given to a call of ``project``. The local queue's order decides (a
        newcomer's first call goes within a round here too); when the budget granted the
        slot for another project, the next grant moves its charge to the one that used it,
        so the shared virtual times count what each project really used."""
        if slot.project != project and slot.project:
            self.share_debt[project] += 1
            self.share_debt[slot.project] -= 1
        return slot

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


class ModelQuotas:
    """The limiter of one process: a budget per model, grants from ``store``."""

    def __init__(self, store: BudgetStore, config: QuotaConfig) -> None:
        self.store = store
        self.config = config
        self._budgets: dict[str, _Budget] = {}
        self.closed = False
        self.granted_rounds = 0
        """Grants asked of the database (a round trip each)."""
        metrics.observe_model_quotas(self)

    @classmethod
    def from_settings(cls, pool: asyncpg.Pool, settings: Settings) -> ModelQuotas:
        store = BudgetStore(pool, credential=credential_of(settings))
        return cls(store, QuotaConfig.from_settings(settings))

    def budget(self, model: str) -> _Budget:
        budget = self._budgets.get(model)
        if budget is None:
            limits = limits_for(model, tier=self.config.tier, declared=self.config.declared)
            budget = self._budgets[model] = _Budget(self, model, limits)
        return budget

    async def acquire(
        self,
        model: str,
        scope: QuotaScope | None,
        on_wait: QuotaWaitSink | None = None,
        *,
        deadline: float | None = None,
        fallback_at: float | None = None,
    ) -> Slot:
        """A slot for one call of ``model``: at once when one is due, else after waiting
        (``on_wait`` told when the wait starts and ends). ``deadline`` (loop time, default
        ``max_wait_s`` from now) bounds the wait: past it :class:`QuotaWaitExceeded`.
        ``fallback_at`` (loop time; the call has a fallback model): when the expected turn
        passes it, or the wait reaches it, :class:`QuotaWaitTooLong` instead of waiting."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        budget = self.budget(model)
        project = scope.project if scope is not None else ""
        slot = budget.take_due(now, project)
        if slot is not None:
            return slot
        deadline = deadline if deadline is not None else now + self.config.max_wait_s
        if fallback_at is not None:
            # Never waits past the maximum for this model when another could answer.
            fallback_at = min(fallback_at, deadline)
        waiter = _Waiter(loop.create_future(), project, fallback_at)
        budget.queue.push(waiter, project=project, age_key=scope.age_key if scope else now)
        budget.pump()
        if waiter.future.done():
            return waiter.future.result()
        if fallback_at is not None:
            expected = budget.expected_wait(now, project)
            if now + expected > fallback_at:
                budget.queue.remove(waiter)
                waiter.future.cancel()
                raise budget.too_long(expected, fallback_at - now)
            budget.bounded.add(waiter)
        limit_at_start = budget.limit
        handed = reported = False
        try:
            async with asyncio.timeout_at(min(deadline, fallback_at or deadline)):
                if on_wait is not None:
                    # A wait shorter than this (a grant's round trip) is not shown on the run:
                    # its event would land between a streamed step's deltas and their text.
                    done, _ = await asyncio.wait({waiter.future}, timeout=WAIT_SHOWN_AFTER_S)
                    if not done:
                        expected = budget.expected_wait(loop.time(), project)
                        reported = True
                        await on_wait(
                            QuotaWait(
                                model=model,
                                limit=limit_at_start,
                                expected_wait_s=expected,
                                waiting=True,
                            )
                        )
                slot = await asyncio.shield(waiter.future)
            handed = True
            return slot
        except TimeoutError:
            if fallback_at is not None:
                expected = budget.expected_wait(loop.time(), project)
                raise budget.too_long(expected, fallback_at - now) from None
            raise QuotaWaitExceeded(
                f"model quota: waited {loop.time() - now:.0f} s for {model} "
                f"({budget.limit}), the maximum wait (AGENTFLEET_MODEL_QUOTA_MAX_WAIT_S)"
            ) from None
        finally:
            budget.bounded.discard(waiter)
            if not waiter.future.done():
                waiter.future.cancel()
                budget.queue.remove(waiter)
            elif not handed and not waiter.future.cancelled() and not waiter.future.exception():
                # Given a slot, then cancelled or timed out before using it: pass it on.
                budget.give_back(waiter.future.result())
            if on_wait is not None and reported:
                with contextlib.suppress(Exception):
                    await on_wait(
                        QuotaWait(
                            model=model,
                            limit=limit_at_start,
                            expected_wait_s=loop.time() - now,
                            waiting=False,
                        )
                    )

    def release(self, slot: Slot, *, tokens: int) -> None:
        """The call of ``slot`` ended, having spent ``tokens`` (0 when it failed)."""
        budget = self.budget(slot.model)
        budget.in_flight -= 1
        if tokens:
            budget.tokens_per_call = 0.8 * budget.tokens_per_call + 0.2 * tokens
            budget.token_debt += tokens - slot.tokens
        # Only a freed concurrency slot or a slot already due needs the queue served now;
        # otherwise the armed timer serves it when the next slot comes due.
        if len(budget.queue) and (
            budget.limits.concurrent_calls is not None
            or (budget.stock and budget.stock[0].at <= asyncio.get_running_loop().time())
        ):
            budget.pump()

    async def throttled(
        self, model: str, retry_after_s: float | None, limit: str | None = None
    ) -> None:
        """A 429 answered a call of ``model``: the shared budget is blocked for every
        process, and this one's unused slots are dropped. ``limit``: the quota the 429 named
        (:func:`~agentfleet.llm.genai_translate.quota_limit`), shown to the calls that wait."""
        budget = self.budget(model)
        budget.stock.clear()
        loop = asyncio.get_running_loop()
        try:
            db_now, state = await self.store.throttled(
                model,
                budget.limits,
                retry_after_s=retry_after_s,
                headroom=self.config.headroom,
            )
        except Exception as exc:
            _log.warning("model quota: recording a 429 failed", model=model, error=repr(exc))
            budget.retry_at = loop.time() + (retry_after_s or DB_RETRY_S)
            return
        budget.rps, _ = rates(budget.limits, state, headroom=self.config.headroom)
        budget.retry_at = state.blocked_until + loop.time() - db_now
        budget.limit = limit or "retry_delay"
        if budget.bounded:
            budget.shed_bounded(loop.time())
        _log.info(
            "model quota: 429, every process backs off",
            model=model,
            retry_after_s=retry_after_s,
            discovered_rpm=round(state.discovered_rps * 60, 1) if state.discovered_rps else None,
        )

    def discovered_rpm(self) -> dict[str, float]:
        """The request rate in force per model (declared or found), per minute."""
        return {m: b.rps * 60 for m, b in self._budgets.items() if b.rps is not None}

    def rate_rpm(self) -> dict[str, tuple[float, str]]:
        """For the ``agentfleet.model.quota.rate`` gauge: per model, the rate in force and
        whether it is the declared one or AIMD's."""
        return {
            m: (b.rps * 60, "declared" if b.limits.requests_per_minute else "discovered")
            for m, b in self._budgets.items()
            if b.rps is not None
        }

    async def guarded(
        self,
        model: str,
        scope: QuotaScope | None,
        on_wait: QuotaWaitSink | None,
        deadline: float,
        call: Callable[[], Awaitable[T]],
        tokens_of: Callable[[T], int],
        fallback_at: float | None = None,
    ) -> T:
        """``call`` once a slot is granted; the slot released with the tokens it spent."""
        slot = await self.acquire(model, scope, on_wait, deadline=deadline, fallback_at=fallback_at)
        tokens = 0
        try:
            result = await call()
            tokens = tokens_of(result)
            return result
        finally:
            self.release(slot, tokens=tokens)

    async def aclose(self) -> None:
        """Stops asking for grants (process shutdown); waiting calls are cancelled by
        their owners."""
        self.closed = True
        for budget in self._budgets.values():
            if budget.timer is not None:
                budget.timer.cancel()
            if budget.refill is not None:
                budget.refill.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await budget.refill
