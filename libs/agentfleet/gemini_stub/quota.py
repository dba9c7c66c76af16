"""The stub's quota mode: Gemini's rate limits, enforced the way the API answers them.

A :class:`StubQuota` holds limits per model (each model counted apart, as Gemini counts per
model and key): requests per window, tokens (input + output) per window, requests per day.
Windows are fixed, aligned on multiples of their length since the epoch. A request that
finds a limit spent in its window is refused with the real 429 body
(``RESOURCE_EXHAUSTED`` with ``google.rpc.QuotaFailure``, ``Help`` and ``RetryInfo`` whose
``retryDelay`` is the time left in the window). The :class:`QuotaLedger` counts what it
accepted and refused in every window, so tests and benchmarks assert that a fleet never
went past the quota (``GET /_stub/quota``).

Written as ``rpm=20/10s,tpm=100000/60s,rpd=1000`` (``/window`` optional: 60 s for ``rpm``
and ``tpm``, a day for ``rpd``); ``--quota`` on the stub's command line, or
``AGENTFLEET_STUB_QUOTA`` for the stub ``agentfleet up`` starts.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Literal

LimitKind = Literal["requests_per_minute", "tokens_per_minute", "requests_per_day"]

_KEYS: dict[str, tuple[LimitKind, float]] = {
    "rpm": ("requests_per_minute", 60.0),
    "tpm": ("tokens_per_minute", 60.0),
    "rpd": ("requests_per_day", 86_400.0),
}
# What the real API names each limit in QuotaFailure (Gemini API, paid tier).
_QUOTA_IDS: dict[LimitKind, tuple[str, str]] = {
    "requests_per_minute": (
        "generativelanguage.googleapis.com/generate_content_requests",
        "GenerateRequestsPerMinutePerProjectPerModel",
    ),
    "tokens_per_minute": (
        "generativelanguage.googleapis.com/generate_content_input_token_count",
        "GenerateContentInputTokensPerModelPerMinute",
    ),
    "requests_per_day": (
        "generativelanguage.googleapis.com/generate_content_requests",
        "GenerateRequestsPerDayPerProjectPerModel",
    ),
}
_ENTRY = re.compile(r"^(rpm|tpm|rpd)=(\d+)(?:/(\d+(?:\.\d+)?)(s|m|h|d)?)?$")
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86_400.0, None: 1.0}
_MAX_WINDOWS = 100_000
QUOTA_MESSAGE = (
    "You exceeded your current quota, please check your plan and billing details. For more "
    "information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits."
)


@dataclass(frozen=True, kw_only=True, slots=True)
class QuotaLimit:
    """One limit, applied to every model apart."""

    kind: LimitKind
    limit: int
    """Requests (or tokens) accepted per window and model."""
    window_s: float


@dataclass(frozen=True, slots=True)
class StubQuota:
    limits: tuple[QuotaLimit, ...]

    def to_text(self) -> str:
        key_of = {kind: key for key, (kind, _) in _KEYS.items()}
        return ",".join(f"{key_of[q.kind]}={q.limit}/{q.window_s:g}s" for q in self.limits)


def parse_quota(text: str) -> StubQuota:
    """``rpm=20/10s,tpm=100000,rpd=1000`` as a :class:`StubQuota`; ValueError saying which
    entry is wrong otherwise."""
    limits: dict[LimitKind, QuotaLimit] = {}
    for entry in (e.strip() for e in text.split(",")):
        match = _ENTRY.match(entry)
        if match is None:
            raise ValueError(
                f"quota entry {entry!r}: expected rpm=N, tpm=N or rpd=N, optionally /WINDOW "
                "(like rpm=20/10s)"
            )
        key, limit, window, unit = match.groups()
        kind, default_window = _KEYS[key]
        window_s = float(window) * _UNIT_S[unit] if window is not None else default_window
        if int(limit) < 1 or window_s <= 0:
            raise ValueError(f"quota entry {entry!r}: the limit and the window must be > 0")
        if kind in limits:
            raise ValueError(f"quota entry {entry!r}: {key} is given twice")
        limits[kind] = QuotaLimit(kind=kind, limit=int(limit), window_s=window_s)
    return StubQuota(tuple(limits.values()))


@dataclass(slots=True)
class WindowCount:
    """What one model's window of one limit accepted and refused."""

    model: str
    kind: LimitKind
    start: float
    """Epoch seconds the window opened."""
    accepted: int = 0
    """Requests let through (for a token limit too: the requests whose tokens it counts)."""
    refused: int = 0
    tokens: int = 0
    """Input + output tokens of the accepted requests (token limits only)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "limit": self.kind,
            "start": self.start,
            "accepted": self.accepted,
            "refused": self.refused,
            "tokens": self.tokens,
        }


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request was refused, and what to answer."""

    limit: QuotaLimit
    model: str
    retry_after_s: float

    def body(self) -> dict[str, Any]:
        """The 429 body the Gemini API sends past a quota."""
        metric, quota_id = _QUOTA_IDS[self.limit.kind]
        delay = max(1, math.ceil(self.retry_after_s))
        return {
            "error": {
                "code": 429,
                "message": QUOTA_MESSAGE,
                "status": "RESOURCE_EXHAUSTED",
                "details": [
                    {
                        "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                        "violations": [
                            {
                                "quotaMetric": metric,
                                "quotaId": quota_id,
                                "quotaDimensions": {"location": "global", "model": self.model},
                                "quotaValue": str(self.limit.limit),
                            }
                        ],
                    },
                    {
                        "@type": "type.googleapis.com/google.rpc.Help",
                        "links": [
                            {
                                "description": "Learn more about Gemini API quotas",
                                "url": "https://ai.google.dev/gemini-api/docs/rate-limits",
                            }
                        ],
                    },
                    {
                        "@type": "type.googleapis.com/google.rpc.RetryInfo",
                        "retryDelay": f"{delay}s",
                    },
                ],
            }
        }


@dataclass(slots=True)
class Admission:
    """An accepted request's windows, to charge its tokens to once they are known."""

    token_windows: list[WindowCount] = field(default_factory=list)

    def charge_tokens(self, tokens: int) -> None:
        for window in self.token_windows:
            window.tokens += tokens


class QuotaLedger:
    """Admits or refuses each request against a :class:`StubQuota`; counts every window.
    Pure bookkeeping: the caller passes the time."""

    def __init__(self, quota: StubQuota) -> None:
        self.quota = quota
        self._windows: dict[tuple[str, LimitKind, float], WindowCount] = {}

    def admit(self, model: str, now: float) -> Admission | Refusal:
        """Counts the request in each of its windows; a :class:`Refusal` (counted as
        refused in the window that refused it) when one is spent."""
        current = [(limit, self._window(model, limit, now)) for limit in self.quota.limits]
        for limit, window in current:
            used = window.tokens if limit.kind == "tokens_per_minute" else window.accepted
            if used >= limit.limit:
                window.refused += 1
                return Refusal(limit, model, window.start + limit.window_s - now)
        admission = Admission()
        for limit, window in current:
            window.accepted += 1
            if limit.kind == "tokens_per_minute":
                admission.token_windows.append(window)
        return admission

    def windows(self) -> list[WindowCount]:
        """Every window seen, oldest first."""
        return sorted(self._windows.values(), key=lambda w: (w.start, w.model, w.kind))

    def to_json(self) -> dict[str, Any]:
        return {
            "quota": self.quota.to_text(),
            "limits": [
                {"limit": q.kind, "value": q.limit, "window_s": q.window_s}
                for q in self.quota.limits
            ],
            "windows": [w.to_json() for w in self.windows()],
        }

    def _window(self, model: str, limit: QuotaLimit, now: float) -> WindowCount:
        start = math.floor(now / limit.window_s) * limit.window_s
        key = (model, limit.kind, start)
        window = self._windows.get(key)
        if window is None:
            if len(self._windows) >= _MAX_WINDOWS:  # a stub left running for weeks
                del self._windows[next(iter(self._windows))]
            window = self._windows[key] = WindowCount(model=model, kind=limit.kind, start=start)
        return window
