"""The shared budget of one model and credential as a timeline, and the grants cut from it.

Every model call of the fleet spends a stretch of one shared timeline: a call costs
``1 / requests_per_second`` of it and its tokens ``tokens / tokens_per_second``; a *grant*
reserves the stretch ``[start, start + span)`` for ``calls`` calls, spaced evenly, and moves
the timeline's end (``tat``, the theoretical arrival time of GCRA) to ``start + span``.
Whoever holds a grant may start its ``i``-th call at ``start + i * spacing``, and no later
than half a spacing after (a slot not used by then is dropped), so in any window of the quota's
length the calls sent exceed the limit by at most one grant: the grant a holder was still
spending when the window opened. Grants are disjoint, so this holds across processes.

Besides the rate: a 429 blocks the whole budget until its ``retryDelay`` has passed
(``blocked_until``); the requests-per-day count resets at midnight Pacific time (the Gemini
API's day); with no declared request rate, the rate is found by AIMD (``discovered_rps``):
halved at a 429 (once per congestion episode, not for a lone one), raised by a few
requests per minute for each minute of use.
Pure functions of a :class:`BudgetState` and the time, so the rules are tested without I/O.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from zoneinfo import ZoneInfo

from agentfleet.llm.limiter.quota_shares import allocate, settle
from agentfleet.settings.quota_settings import ModelLimits

_PACIFIC = ZoneInfo("America/Los_Angeles")
DEFAULT_BLOCK_S = 1.0
MAX_BLOCK_S = 300.0
"""The longest one 429 blocks the budget, whatever its retryDelay says."""
"""How long a 429 without retryDelay blocks the budget."""
MIN_DISCOVERED_RPS = 1 / 60
"""AIMD never goes below one request per minute."""
ADDITIVE_RPM_PER_MINUTE = 6.0
"""AIMD's additive increase: the rate grows by this many requests per minute for each
minute's worth of calls granted at it."""
MIN_GRANT_CALLS = 4
"""A grant holds at least this many calls (when they are wanted), up to MIN_GRANT_MAX_S of
the rate: fewer round trips per call on small quotas. Not 8: at 2 requests/s that cut the
limiter's CPU per call from about 0.19 to 0.15 ms (bench/quota.py, 39 -> 23 grants), but a
newcomer's first call on another process waits about one grant length, and the small
project's span went from 2.02x to 2.30x its ideal."""
MIN_GRANT_MAX_S = 4.0
"""The most of the rate MIN_GRANT_CALLS may stretch a grant to (when ``grant_s`` is
shorter): on a slow quota (5 requests/min) 4 calls would reserve the timeline for 48 s."""
LONE_429_S = 60.0
"""A 429 with none in this many seconds before it is a blip: AIMD waits for a second."""
UNLIMITED_SLOT_S = 2.0
"""With no rate known, how long a granted slot stays usable."""


@dataclass(frozen=True, kw_only=True, slots=True)
class BudgetState:
    """One row of ``kb.model_quota_budgets``; times are epoch seconds on the database clock."""

    tat: float = 0.0
    """Where the timeline's reserved part ends."""
    blocked_until: float = 0.0
    """No call before this (a 429's retryDelay)."""
    day: str = ""
    """The Pacific date ``day_requests`` counts."""
    day_requests: int = 0
    discovered_rps: float | None = None
    """AIMD's rate; None until a 429 says there is a limit."""
    last_decrease: float = 0.0
    last_throttled: float = 0.0
    """When the last 429 came: a lone one (none in the minute before) only blocks."""
    recent_since: float = 0.0
    """Start of the span ``recent_calls`` counts (AIMD's first guess of the rate)."""
    recent_calls: int = 0
    shares: dict[str, list[float]] = field(default_factory=dict)
    """Contending projects' ``[virtual_time, last_asked]`` (:mod:`.quota_shares`)."""
    vclock: float = 0.0
    """Virtual time of the last call granted."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Grant:
    """``calls`` slots: the ``i``-th usable from ``start + i * spacing`` for ``valid_s``."""

    start: float
    spacing: float
    calls: int
    valid_s: float
    tokens_per_call: float
    """The tokens each slot was charged for (what a call is expected to spend)."""
    tags: tuple[str, ...] = ()
    """The project each slot was granted for (empty: any), by :mod:`.quota_shares`."""

    def slot_times(self) -> list[float]:
        return [self.start + i * self.spacing for i in range(self.calls)]


@dataclass(frozen=True, kw_only=True, slots=True)
class Refused:
    """No grant now: ask again at ``retry_at`` (epoch s); ``limit`` names what holds it."""

    retry_at: float
    limit: str


def rates(
    limits: ModelLimits, state: BudgetState, *, headroom: float
) -> tuple[float | None, float | None]:
    """Requests and tokens per second in force (None: no limit): the declared ones times
    ``headroom``, the request rate lowered to AIMD's when that is lower."""
    rps = limits.requests_per_minute / 60 * headroom if limits.requests_per_minute else None
    if state.discovered_rps is not None:
        rps = state.discovered_rps if rps is None else min(rps, state.discovered_rps)
    tps = limits.tokens_per_minute / 60 * headroom if limits.tokens_per_minute else None
    return rps, tps


_day_span: tuple[float, float, str] = (0.0, 0.0, "")
"""The last Pacific day asked for: its start and end (epoch s) and its date."""


def pacific_day(now: float) -> str:
    """The Pacific date at ``now``; asked at every grant, so the day last found is kept
    with its bounds (a time-zone conversion costs more than the rest of a grant's
    arithmetic)."""
    global _day_span
    start, end, day = _day_span
    if start <= now < end:
        return day
    local = dt.datetime.fromtimestamp(now, _PACIFIC)
    start = dt.datetime.combine(local.date(), dt.time(), _PACIFIC).timestamp()
    day = local.date().isoformat()
    _day_span = (start, next_pacific_midnight(now), day)
    return day


def next_pacific_midnight(now: float) -> float:
    local = dt.datetime.fromtimestamp(now, _PACIFIC)
    tomorrow = (local + dt.timedelta(days=1)).date()
    return dt.datetime.combine(tomorrow, dt.time(), _PACIFIC).timestamp()


def take_grant(
    state: BudgetState,
    limits: ModelLimits,
    *,
    calls: int,
    tokens_per_call: float,
    token_debt: float,
    now: float,
    horizon_s: float,
    grant_s: float = 1.0,
    headroom: float = 1.0,
    wants: Mapping[str, int] | None = None,
    weights: Mapping[str, float] | None = None,
    share_debt: Mapping[str, int] | None = None,
) -> tuple[BudgetState, Grant | Refused]:
    """Up to ``calls`` slots (at most ``grant_s`` of the rate), charged ``tokens_per_call``
    each plus ``token_debt`` (tokens earlier grants' calls spent beyond their charge;
    negative when they spent less).
    Refused while the budget is blocked further than ``horizon_s`` ahead, while its
    reserved timeline ends further than that, or when the day's requests are spent."""
    day = pacific_day(now)
    if day != state.day:
        state = replace(state, day=day, day_requests=0)
    if share_debt:
        shares = settle(state.shares, state.vclock, share_debt, weights or {}, now=now)
        state = replace(state, shares=shares)
    if limits.requests_per_day is not None:
        calls = min(calls, limits.requests_per_day - state.day_requests)
        if calls <= 0:
            return state, Refused(retry_at=next_pacific_midnight(now), limit="requests_per_day")
    if state.blocked_until > now + horizon_s:
        return state, Refused(retry_at=state.blocked_until - horizon_s, limit="retry_delay")
    rps, tps = rates(limits, state, headroom=headroom)
    start = max(now, state.blocked_until)
    if rps is None and tps is None:
        grant = Grant(
            start=start, spacing=0.0, calls=calls, valid_s=UNLIMITED_SLOT_S, tokens_per_call=0.0
        )
        return _granted(state, grant, end=state.tat, now=now), grant
    if state.tat > now + horizon_s:
        limit = "requests_per_minute" if rps is not None else "tokens_per_minute"
        return state, Refused(retry_at=state.tat - horizon_s, limit=limit)
    start = max(start, state.tat)
    # One grant is at most ``grant_s`` of the budget (or MIN_GRANT_CALLS), however many
    # calls wait.
    # (Slots are paced on the timeline, so a grant's size never adds calls to a window: it
    # only bounds what a holder that dies leaves unused, and how far ahead it reserves.)
    if rps is not None:
        calls = min(calls, _grant_calls(rps, grant_s))
    if tps is not None and tokens_per_call > 0:
        calls = min(calls, _grant_calls(tps / tokens_per_call, grant_s))
    tags: tuple[str, ...] = ()
    if wants:
        # Cut between the projects wanted, by weight across every process (a project at
        # most one grant ahead of the least-served one contending).
        cut = allocate(
            state.shares,
            state.vclock,
            wants,
            weights or {},
            calls=calls,
            now=now,
            lead=_grant_calls(rps, grant_s) if rps else MIN_GRANT_CALLS,
            rps=rps,
        )
        if not cut.tags:
            state = replace(state, shares=cut.shares, vclock=cut.vclock)
            return state, Refused(retry_at=now + cut.retry_in_s, limit="fair_share")
        calls, tags = len(cut.tags), cut.tags
        shares, vclock = cut.shares, cut.vclock
    else:
        shares, vclock = state.shares, state.vclock
    request_span = calls / rps if rps is not None else 0.0
    token_span = max(0.0, calls * tokens_per_call + token_debt) / tps if tps is not None else 0.0
    span = max(request_span, token_span)
    spacing = span / calls
    grant = Grant(
        start=start,
        spacing=spacing,
        calls=calls,
        valid_s=max(spacing / 2, 0.05),
        tokens_per_call=tokens_per_call,
        tags=tags,
    )
    return _granted(state, grant, end=start + span, now=now, shares=shares, vclock=vclock), grant


def _granted(
    state: BudgetState,
    grant: Grant,
    *,
    end: float,
    now: float,
    shares: dict[str, list[float]] | None = None,
    vclock: float | None = None,
) -> BudgetState:
    recent_since, recent_calls = state.recent_since, state.recent_calls
    if now - recent_since > 60:
        recent_since, recent_calls = now, 0
    discovered = state.discovered_rps
    if discovered is not None:
        # A minute's worth of calls (60 * rate of them) adds ADDITIVE_RPM_PER_MINUTE.
        discovered += grant.calls * ADDITIVE_RPM_PER_MINUTE / 60 / (60 * discovered)
    # Built whole rather than by replace(): a grant's one copy of the row.
    return BudgetState(
        tat=end,
        blocked_until=state.blocked_until,
        day=state.day,
        day_requests=state.day_requests + grant.calls,
        discovered_rps=discovered,
        last_decrease=state.last_decrease,
        last_throttled=state.last_throttled,
        recent_since=recent_since,
        recent_calls=recent_calls + grant.calls,
        shares=state.shares if shares is None else shares,
        vclock=state.vclock if vclock is None else vclock,
    )


def throttled(
    state: BudgetState,
    limits: ModelLimits,
    *,
    retry_after_s: float | None,
    now: float,
    headroom: float = 1.0,
) -> BudgetState:
    """The budget after a 429: blocked for its retry delay; with no declared request rate,
    AIMD's rate halved (from the rate found so far, or the rate of the last minute's grants
    when none was), once per episode, an episode lasting as long as the block."""
    delay = retry_after_s if retry_after_s is not None and retry_after_s > 0 else DEFAULT_BLOCK_S
    # The model server is not trusted to stop the fleet: a retryDelay of days blocks it
    # for MAX_BLOCK_S, then calls find out again.
    delay = min(delay, MAX_BLOCK_S)
    blocked_until = max(state.blocked_until, now + delay)
    lone = state.last_throttled <= 0 or state.last_throttled < now - LONE_429_S
    state = replace(state, last_throttled=now)
    if lone or state.last_decrease > now - delay or limits.requests_per_minute is not None:
        # A declared rate is the operator's word: a 429 (a window's edge, another client
        # on the key) blocks the budget for its delay, it does not lower the rate; nor
        # does a lone 429 (a blip), nor one in the episode already answered.
        return replace(state, blocked_until=blocked_until, tat=max(state.tat, blocked_until))
    rps, _ = rates(limits, state, headroom=headroom)
    if rps is None:
        elapsed = max(1.0, now - state.recent_since)
        rps = max(state.recent_calls / elapsed, MIN_DISCOVERED_RPS * 2)
    return replace(
        state,
        blocked_until=blocked_until,
        discovered_rps=max(MIN_DISCOVERED_RPS, rps / 2),
        last_decrease=now,
        # Nothing reserved before the 429 may go out before the block lifts.
        tat=max(state.tat, blocked_until),
    )


def grant_size(rps: float | None, *, wanted: int, grant_s: float, unlimited_batch: int) -> int:
    """How many calls to ask for: what is wanted, at most ``grant_s`` of the rate (or
    MIN_GRANT_CALLS, :func:`_grant_calls`), or ``unlimited_batch`` when no rate is known."""
    if rps is None:
        return max(1, min(wanted, unlimited_batch))
    return max(1, min(wanted, _grant_calls(rps, grant_s)))


def _grant_calls(calls_per_s: float, grant_s: float) -> int:
    """A grant's most calls at ``calls_per_s``: ``grant_s`` of the rate, or MIN_GRANT_CALLS
    when that is more, as long as they fit in MIN_GRANT_MAX_S of it; at least one."""
    calls = max(MIN_GRANT_CALLS, math.floor(calls_per_s * grant_s))
    return max(1, min(calls, math.floor(calls_per_s * max(grant_s, MIN_GRANT_MAX_S))))
