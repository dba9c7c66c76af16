"""The shared budgets in PostgreSQL (``kb.model_quota_budgets``): two autocommitted round
trips per grant or per 429, on the database's clock.

The row is read (with the database's time), :mod:`agentfleet.llm.limiter.quota_math` decides in
Python, and the row is written back only if nobody wrote it in between (``version``, a
compare-and-set): the same serial order as locking the row in a transaction, at half the
round trips (a transaction is BEGIN, read FOR UPDATE, write, COMMIT). A write that lost the
race reads again; after MAX_OPTIMISTIC_TRIES losses (many processes granting at once) it
takes the row lock instead, so a grant always finishes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import Any, TypeVar

import asyncpg

from agentfleet.llm.limiter.quota_math import BudgetState, Grant, Refused, take_grant, throttled
from agentfleet.postgres.db import transaction
from agentfleet.settings.quota_settings import ModelLimits

T = TypeVar("T")

_COLUMNS = [f.name for f in fields(BudgetState)]
MAX_OPTIMISTIC_TRIES = 4
_READ = f"""
SELECT {", ".join(_COLUMNS)}, version, extract(epoch FROM clock_timestamp())::float8 AS now
FROM kb.model_quota_budgets WHERE model = $1 AND credential = $2
"""
_CREATE = """
INSERT INTO kb.model_quota_budgets (model, credential) VALUES ($1, $2)
ON CONFLICT (model, credential) DO NOTHING
"""
_LOCK = f"""
INSERT INTO kb.model_quota_budgets AS b (model, credential) VALUES ($1, $2)
ON CONFLICT (model, credential) DO UPDATE SET model = b.model
RETURNING {", ".join(_COLUMNS)}, extract(epoch FROM clock_timestamp())::float8 AS now
"""
_SAVE = f"""
UPDATE kb.model_quota_budgets SET
    {", ".join(f"{c} = ${i + 3}" for i, c in enumerate(_COLUMNS))},
    granted_total = granted_total + ${len(_COLUMNS) + 3},
    throttled_total = throttled_total + ${len(_COLUMNS) + 4},
    version = version + 1,
    updated_at = now()
WHERE model = $1 AND credential = $2
"""
_SAVE_IF_UNCHANGED = _SAVE.rstrip() + f" AND version = ${len(_COLUMNS) + 5}\n"


class BudgetStore:
    """Grants and 429s of the budgets of one credential."""

    def __init__(self, pool: asyncpg.Pool, *, credential: str) -> None:
        self._pool = pool
        self.credential = credential

    async def grant(
        self, model: str, limits: ModelLimits, **request: Any
    ) -> tuple[float, BudgetState, Grant | Refused]:
        """The database's time, the budget after, and a grant (or why not) per
        :func:`~agentfleet.llm.limiter.quota_math.take_grant`."""

        def decide(state: BudgetState, now: float) -> tuple[BudgetState, Grant | Refused, int]:
            state, outcome = take_grant(state, limits, now=now, **request)
            return state, outcome, 0

        now, state, outcome = await self._update(model, decide)
        return now, state, outcome

    async def throttled(
        self, model: str, limits: ModelLimits, *, retry_after_s: float | None, headroom: float
    ) -> tuple[float, BudgetState]:
        """Records a 429 for every process: the budget blocked, AIMD's rate lowered."""

        def decide(state: BudgetState, now: float) -> tuple[BudgetState, None, int]:
            state = throttled(
                state, limits, retry_after_s=retry_after_s, now=now, headroom=headroom
            )
            return state, None, 1

        now, state, _ = await self._update(model, decide)
        return now, state

    async def _update(
        self, model: str, decide: Callable[[BudgetState, float], tuple[BudgetState, T, int]]
    ) -> tuple[float, BudgetState, T]:
        """``decide(state, now)`` applied to the row: (new state, outcome, 429s counted)."""
        async with self._pool.acquire() as conn:
            for _ in range(MAX_OPTIMISTIC_TRIES):
                row = await conn.fetchrow(_READ, model, self.credential)
                if row is None:
                    await conn.execute(_CREATE, model, self.credential)
                    continue
                state = BudgetState(**{c: row[c] for c in _COLUMNS})
                now = float(row["now"])
                state, outcome, throttled_calls = decide(state, now)
                status = await conn.execute(
                    _SAVE_IF_UNCHANGED,
                    model,
                    self.credential,
                    *self._values(state),
                    _granted(outcome),
                    throttled_calls,
                    row["version"],
                )
                if status == "UPDATE 1":
                    return now, state, outcome
        # Lost every race: wait for the row's lock instead.
        async with transaction(self._pool) as conn:
            state, now = await self._lock(conn, model)
            state, outcome, throttled_calls = decide(state, now)
            await conn.execute(
                _SAVE,
                model,
                self.credential,
                *self._values(state),
                _granted(outcome),
                throttled_calls,
            )
        return now, state, outcome

    async def _lock(self, conn: asyncpg.Connection, model: str) -> tuple[BudgetState, float]:
        row = await conn.fetchrow(_LOCK, model, self.credential)
        assert row is not None
        return BudgetState(**{c: row[c] for c in _COLUMNS}), float(row["now"])

    @staticmethod
    def _values(state: BudgetState) -> list[Any]:
        return [getattr(state, c) for c in _COLUMNS]


def _granted(outcome: object) -> int:
    return outcome.calls if isinstance(outcome, Grant) else 0
