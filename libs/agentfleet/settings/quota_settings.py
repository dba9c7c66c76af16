"""What the operator declares about each model's quota, and the Gemini tiers' published limits.

``AGENTFLEET_MODEL_QUOTAS`` holds one entry per model, ``;``-separated::

    gemini-2.5-pro:rpm=150,tpm=2000000,rpd=10000,concurrent=20; *:rpm=1000

``rpm`` requests per minute, ``tpm`` input+output tokens per minute, ``rpd`` requests per
day (the Gemini API's day: midnight Pacific time), ``concurrent`` calls in flight per process;
``*`` applies to every model no entry names. ``AGENTFLEET_MODEL_QUOTA_TIER`` starts from a
tier's published limits (:data:`GEMINI_TIERS`); entries override them per model. A model
with no declared limit is still limited: the fleet learns its limit from the 429s it gets
(:mod:`agentfleet.llm.limiter.quota_math`). Pure parsing, no I/O, so :mod:`agentfleet.config` reads
it without importing the model client.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

ANY_MODEL = "*"


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelLimits:
    """One model's declared limits (None: not declared)."""

    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    """Input plus output tokens."""
    requests_per_day: int | None = None
    concurrent_calls: int | None = None
    """Calls in flight at once, per process."""

    def merged(self, override: ModelLimits) -> ModelLimits:
        """These limits with every limit ``override`` declares replaced."""
        changes = {
            name: getattr(override, name)
            for name in self.__slots__  # type: ignore[attr-defined]
            if getattr(override, name) is not None
        }
        return replace(self, **changes)

    @property
    def declared(self) -> bool:
        return any(getattr(self, n) is not None for n in self.__slots__)  # type: ignore[attr-defined]


# Published Gemini API limits per model and tier (ai.google.dev/gemini-api/docs/rate-limits,
# as of 2026-11); an operator whose numbers differ declares them in AGENTFLEET_MODEL_QUOTAS.
GEMINI_TIERS: Mapping[str, Mapping[str, ModelLimits]] = {
    "free": {
        "gemini-2.5-pro": ModelLimits(
            requests_per_minute=5, tokens_per_minute=250_000, requests_per_day=100
        ),
        "gemini-2.5-flash": ModelLimits(
            requests_per_minute=10, tokens_per_minute=250_000, requests_per_day=250
        ),
        "gemini-2.5-flash-lite": ModelLimits(
            requests_per_minute=15, tokens_per_minute=250_000, requests_per_day=1000
        ),
    },
    "tier1": {
        "gemini-2.5-pro": ModelLimits(
            requests_per_minute=150, tokens_per_minute=2_000_000, requests_per_day=10_000
        ),
        "gemini-2.5-flash": ModelLimits(
            requests_per_minute=1000, tokens_per_minute=1_000_000, requests_per_day=10_000
        ),
        "gemini-2.5-flash-lite": ModelLimits(
            requests_per_minute=4000, tokens_per_minute=4_000_000, requests_per_day=None
        ),
    },
    "tier2": {
        "gemini-2.5-pro": ModelLimits(
            requests_per_minute=1000, tokens_per_minute=5_000_000, requests_per_day=50_000
        ),
        "gemini-2.5-flash": ModelLimits(
            requests_per_minute=2000, tokens_per_minute=3_000_000, requests_per_day=100_000
        ),
        "gemini-2.5-flash-lite": ModelLimits(
            requests_per_minute=10_000, tokens_per_minute=10_000_000, requests_per_day=None
        ),
    },
    "tier3": {
        "gemini-2.5-pro": ModelLimits(requests_per_minute=2000, tokens_per_minute=8_000_000),
        "gemini-2.5-flash": ModelLimits(requests_per_minute=10_000, tokens_per_minute=8_000_000),
        "gemini-2.5-flash-lite": ModelLimits(
            requests_per_minute=30_000, tokens_per_minute=30_000_000
        ),
    },
}
TIERS = ("off", *GEMINI_TIERS)

_KEYS = {
    "rpm": "requests_per_minute",
    "tpm": "tokens_per_minute",
    "rpd": "requests_per_day",
    "concurrent": "concurrent_calls",
}
_MODEL = re.compile(r"^(\*|[A-Za-z0-9][A-Za-z0-9._-]{0,127})$")


def parse_model_quotas(raw: str) -> dict[str, ModelLimits]:
    """``model:rpm=N,tpm=N,rpd=N,concurrent=N; ...`` by model; ValueError naming the entry."""
    quotas: dict[str, ModelLimits] = {}
    for entry in (e.strip() for e in raw.split(";")):
        if not entry:
            continue
        model, colon, limits = entry.partition(":")
        model = model.strip()
        if not colon or not _MODEL.match(model):
            raise ValueError(f"entry {entry!r}: expected MODEL:rpm=N,tpm=N,rpd=N,concurrent=N")
        if model in quotas:
            raise ValueError(f"entry {entry!r}: model {model!r} is given twice")
        values: dict[str, int] = {}
        for item in (i.strip() for i in limits.split(",")):
            key, equals, number = item.partition("=")
            if not equals or key not in _KEYS or not number.isdigit() or int(number) < 1:
                raise ValueError(
                    f"entry {entry!r}: {item!r} is not one of rpm=N, tpm=N, rpd=N, "
                    "concurrent=N with N >= 1"
                )
            values[_KEYS[key]] = int(number)
        quotas[model] = ModelLimits(**values)
    return quotas


def parse_project_weights(raw: str) -> dict[str, float]:
    """``project=weight,...`` (weights > 0, at most 1000); ValueError naming the entry."""
    weights: dict[str, float] = {}
    for item in (i.strip() for i in raw.split(",")):
        if not item:
            continue
        project, equals, number = item.partition("=")
        try:
            weight = float(number)
        except ValueError:
            weight = 0.0
        if not equals or not project.strip() or not 0 < weight <= 1000:
            raise ValueError(f"{item!r}: expected PROJECT=WEIGHT with 0 < WEIGHT <= 1000")
        weights[project.strip()] = weight
    return weights


def limits_for(model: str, *, tier: str, declared: Mapping[str, ModelLimits]) -> ModelLimits:
    """The limits in force for ``model``: the tier's, overridden by the ``*`` entry, then by
    the model's own entry."""
    base = GEMINI_TIERS.get(tier, {}).get(model, ModelLimits())
    for key in (ANY_MODEL, model):
        if key in declared:
            base = base.merged(declared[key])
    return base
