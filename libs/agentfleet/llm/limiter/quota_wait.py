"""What a model call waiting for its model's shared quota tells its run.

The limiter (:mod:`agentfleet.llm.limiter.quota`) calls an optional ``on_wait`` callback of this
type
when a call starts waiting for quota (``waiting=True``) and when it stops (``waiting=False``),
so the run can show "waiting for model quota: gemini-2.5-pro, about 12 s".
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class QuotaWait:
    """A model call's wait for quota, as it starts or ends."""

    model: str
    """The model whose quota the call waits for, as the request named it."""
    limit: str
    """The limit that holds the call: ``requests_per_minute``, ``tokens_per_minute``,
    ``requests_per_day``, ``concurrent_calls``, ``retry_delay`` (the API said to wait) or
    ``fair_share`` (its project is ahead of its weighted share of a busy budget)."""
    expected_wait_s: float
    """The limiter's estimate of the wait when it starts; the time waited when it ends."""
    waiting: bool
    """True when the wait starts, False when it ends (the call goes ahead or gives up)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class QuotaScope:
    """Who a call is for, to order it among the calls waiting for the same model."""

    project: str
    age_key: float
    """Its run's creation time (epoch s): the oldest run's call goes first."""


QuotaWaitSink = Callable[[QuotaWait], Awaitable[None]]
"""Receives a call's :class:`QuotaWait` notices; awaited before the call goes on."""
