"""The shared model limiter: every model call of a process takes a slot of its model's
budget first; slots come from grants of the budget shared through PostgreSQL.

One :class:`ModelQuotas` per process (executor, dispatcher), one
:class:`~agentfleet.llm.limiter.quota_budget.ModelBudget` in it per model. A call that finds a slot
due takes it without any I/O; otherwise it waits in the
budget's :class:`~agentfleet.llm.limiter.quota_queue.FairQueue` (fair between projects, oldest run
first) on a future, holding no database connection, while one refill task at a time asks
:class:`~agentfleet.llm.limiter.quota_store.BudgetStore` for the next grant, sized to what waits and
to the calls of the last grant's length. A 429 blocks the shared budget for its
``retryDelay`` (every process sees it at its next grant) and drops this process's unused
slots; the call then waits again, its retries untouched. A call waits at most
``max_wait_s`` in all, then fails with :class:`~agentfleet.llm.errors.QuotaWaitExceeded`
naming the model and the limit. The design and its bounds: docs/DESIGN.md, "Model quotas,
costs and budgets".
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

import asyncpg
import structlog

from agentfleet.config import Settings
from agentfleet.llm.errors import QuotaWaitExceeded
from agentfleet.llm.limiter.quota_budget import DB_RETRY_S, ModelBudget, Slot, Waiter
from agentfleet.llm.limiter.quota_math import rates
from agentfleet.llm.limiter.quota_store import BudgetStore
from agentfleet.llm.limiter.quota_wait import QuotaScope, QuotaWait, QuotaWaitSink
from agentfleet.observability import metrics
from agentfleet.settings.quota_settings import ModelLimits, limits_for

_log = structlog.get_logger(__name__)
T = TypeVar("T")

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


class ModelQuotas:
    """The limiter of one process: a budget per model, grants from ``store``."""

    def __init__(self, store: BudgetStore, config: QuotaConfig) -> None:
        self.store = store
        self.config = config
        self._budgets: dict[str, ModelBudget] = {}
        self.closed = False
        self.granted_rounds = 0
        """Grants asked of the database (a round trip each)."""
        metrics.observe_model_quotas(self)

    @classmethod
    def from_settings(cls, pool: asyncpg.Pool, settings: Settings) -> ModelQuotas:
        store = BudgetStore(pool, credential=credential_of(settings))
        return cls(store, QuotaConfig.from_settings(settings))

    def budget(self, model: str) -> ModelBudget:
        budget = self._budgets.get(model)
        if budget is None:
            limits = limits_for(model, tier=self.config.tier, declared=self.config.declared)
            budget = self._budgets[model] = ModelBudget(self, model, limits)
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
        waiter = Waiter(loop.create_future(), project, fallback_at)
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
                # Awaited directly, not through shield(): the slot's hand-over then wakes
                # this task in one loop iteration, not two (a cancel cancels the future,
                # and a slot handed just before the cancel is given back below).
                slot = await waiter.future
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
            if not waiter.future.done() or waiter.future.cancelled():
                waiter.future.cancel()
                budget.queue.remove(waiter)
            elif not handed and not waiter.future.exception():
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
        budget = self._budgets[slot.model]
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
