"""A model call waiting for its share of a model's quota, as the limiter reports it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class QuotaWait:
    model: str
    limit: str
    expected_wait_s: float
    waiting: bool
