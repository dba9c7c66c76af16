"""The shared budgets in PostgreSQL (``kb.model_quota_budgets``): one short transaction per
grant or per 429, the row locked while :mod:`agentfleet.llm.quota_math` decides, on the
database's clock."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import asyncpg

from agentfleet.llm.quota_math import BudgetState, Grant, Refused, take_grant, throttled
from agentfleet.postgres.db import transaction
from agentfleet.quota_settings import ModelLimits

_COLUMNS = [f.name for f in fields(BudgetState)]
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
    updated_at = now()
WHERE model = $1 AND credential = $2
"""


class BudgetStore:
    """Grants and 429s of the budgets of one credential."""

    def __init__(self, pool: asyncpg.Pool, *, credential: str) -> None:
        self._pool = pool
        self.credential = credential

    async def grant(
        self, model: str, limits: ModelLimits, **request: Any
    ) -> tuple[float, BudgetState, Grant | Refused]:
        """The database's time, the budget after, and a grant (or why not) per
        :func:`~agentfleet.llm.quota_math.take_grant`."""
        async with transaction(self._pool) as conn:
            state, now = await self._lock(conn, model)
            state, outcome = take_grant(state, limits, now=now, **request)
            granted = outcome.calls if isinstance(outcome, Grant) else 0
            await self._save(conn, model, state, granted=granted, throttled_calls=0)
        return now, state, outcome

    async def throttled(
        self, model: str, limits: ModelLimits, *, retry_after_s: float | None, headroom: float
    ) -> tuple[float, BudgetState]:
        """Records a 429 for every process: the budget blocked, AIMD's rate lowered."""
        async with transaction(self._pool) as conn:
            state, now = await self._lock(conn, model)
            state = throttled(
                state, limits, retry_after_s=retry_after_s, now=now, headroom=headroom
            )
            await self._save(conn, model, state, granted=0, throttled_calls=1)
        return now, state

    async def _lock(self, conn: asyncpg.Connection, model: str) -> tuple[BudgetState, float]:
        row = await conn.fetchrow(_LOCK, model, self.credential)
        assert row is not None
        return BudgetState(**{c: row[c] for c in _COLUMNS}), float(row["now"])

    async def _save(
        self,
        conn: asyncpg.Connection,
        model: str,
        state: BudgetState,
        *,
        granted: int,
        throttled_calls: int,
    ) -> None:
        values = [getattr(state, c) for c in _COLUMNS]
        await conn.execute(_SAVE, model, self.credential, *values, granted, throttled_calls)
