"""Project budgets (issue #31): daily and monthly limits in tokens and in cost, a warning
threshold, and a hard stop that pauses a run before its next model call.

The limits are ``kb.project_budgets`` (SetProjectBudget, admin only); the usage they are
checked against is ``kb.project_usage``, which the statement recording each model reply adds
to (``record_model_reply`` in ``events/run_events.sql``), per UTC day and month. A run checks
before each model call (one indexed read of at most three rows): at or past a limit it PAUSES
with a SAFETY ``budget_stop`` naming the limit, and ResumeRun continues it once the period
resets or the limit is raised. Runs already inside a model call finish it, so a project can
pass a limit by at most one call per run in flight. The first run to see the warning fraction
passed in a period emits SAFETY ``budget_warning`` (once: the period row's ``warned`` flag).

A tree's cost limit (StartRunRequest ``max_tree_cost_nanos``, on the root) is checked in the
same read against the live sum of its runs' costs, and pauses the run the same way.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import asyncpg

from agentfleet import events
from agentfleet.errors import InvalidArgument
from agentfleet.observability import metrics
from agentfleet.settings.model_prices import NANOS_PER_USD, usd
from services.executor.runs import RunRecord
from services.executor.store.persistence import RunRecorder, complete_then_cancel

LIMITS = ("daily_tokens", "monthly_tokens", "daily_cost_nanos", "monthly_cost_nanos")
MAX_TOKENS_LIMIT = 10**15
MAX_COST_LIMIT_NANOS = 10**6 * NANOS_PER_USD
"""USD 1,000,000: above it a limit is a typo, not a budget."""
DEFAULT_WARN_FRACTION = 0.8


@dataclass(frozen=True, kw_only=True, slots=True)
class ProjectBudget:
    """A project's limits; None = no limit."""

    daily_tokens: int | None = None
    monthly_tokens: int | None = None
    daily_cost_nanos: int | None = None
    monthly_cost_nanos: int | None = None
    warn_fraction: float = DEFAULT_WARN_FRACTION

    def checked(self) -> ProjectBudget:
        """Itself; InvalidArgument naming the first bad field (budget.<name>)."""
        for name in LIMITS:
            value = getattr(self, name)
            high = MAX_COST_LIMIT_NANOS if name.endswith("cost_nanos") else MAX_TOKENS_LIMIT
            if value is not None and not 0 < value <= high:
                raise InvalidArgument.for_field(
                    f"budget.{name}", f"must be between 1 and {high}, got {value}"
                )
        fraction = self.warn_fraction
        if not math.isfinite(fraction) or not 0 < fraction <= 1:
            raise InvalidArgument.for_field(
                "budget.warn_fraction", f"must be in (0, 1], got {fraction}"
            )
        return self


@dataclass(frozen=True, kw_only=True, slots=True)
class ProjectUsage:
    """Tokens and cost of the current UTC day and month."""

    day_tokens: int = 0
    day_cost_nanos: int = 0
    month_tokens: int = 0
    month_cost_nanos: int = 0


@dataclass(frozen=True, kw_only=True, slots=True)
class Reached:
    """A limit the usage has reached (or, for a warning, the fraction of it)."""

    limit: str
    used: int
    budget: int

    def describe(self) -> str:
        if self.limit.endswith("cost_nanos"):
            name = self.limit.removesuffix("_nanos")
            return f"{name} {usd(self.used)} of {usd(self.budget)}"
        return f"{self.limit} {self.used} of {self.budget}"


def _used(limit: str, usage: ProjectUsage) -> int:
    period = "day" if limit.startswith("daily") else "month"
    kind = "cost_nanos" if limit.endswith("cost_nanos") else "tokens"
    return int(getattr(usage, f"{period}_{kind}"))


def verdict(budget: ProjectBudget, usage: ProjectUsage) -> tuple[Reached | None, Reached | None]:
    """(the first limit reached, the first limit past its warning fraction); pure."""
    stop = warning = None
    for limit in LIMITS:
        cap = getattr(budget, limit)
        if cap is None:
            continue
        used = _used(limit, usage)
        if stop is None and used >= cap:
            stop = Reached(limit=limit, used=used, budget=cap)
        if warning is None and used >= cap * budget.warn_fraction:
            warning = Reached(limit=limit, used=used, budget=cap)
    return stop, warning


_TODAY = "(now() AT TIME ZONE 'UTC')::date"
_THIS_MONTH = "date_trunc('month', now() AT TIME ZONE 'UTC')::date"

_READ = f"""
SELECT b.daily_tokens, b.monthly_tokens, b.daily_cost_nanos, b.monthly_cost_nanos,
       b.warn_fraction,
       coalesce(d.tokens, 0) AS day_tokens, coalesce(d.cost_nanos, 0) AS day_cost_nanos,
       coalesce(m.tokens, 0) AS month_tokens, coalesce(m.cost_nanos, 0) AS month_cost_nanos,
       coalesce(d.warned, false) AS day_warned, coalesce(m.warned, false) AS month_warned,
       t.max_tree_cost_nanos,
       CASE WHEN t.max_tree_cost_nanos IS NULL THEN 0 ELSE (
           SELECT coalesce(sum(r.cost_nanos), 0) FROM kb.agent_runs r
           WHERE r.root_run_id = t.id AND r.project_id = p.project_id) END AS tree_cost_nanos
FROM (SELECT $1::text AS project_id) p
LEFT JOIN kb.agent_runs t ON t.id = $2::uuid AND t.project_id = p.project_id
LEFT JOIN kb.project_budgets b ON b.project_id = p.project_id
LEFT JOIN kb.project_usage d
    ON d.project_id = p.project_id AND d.period = 'day' AND d.period_start = {_TODAY}
LEFT JOIN kb.project_usage m
    ON m.project_id = p.project_id AND m.period = 'month' AND m.period_start = {_THIS_MONTH}
"""

_MARK_WARNED = f"""
UPDATE kb.project_usage SET warned = true
WHERE project_id = $1 AND NOT warned
  AND ((period = 'day' AND period_start = {_TODAY} AND $2 = 'day')
       OR (period = 'month' AND period_start = {_THIS_MONTH} AND $2 = 'month'))
RETURNING project_id
"""

_UPSERT = """
INSERT INTO kb.project_budgets (project_id, daily_tokens, monthly_tokens, daily_cost_nanos,
                                monthly_cost_nanos, warn_fraction)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (project_id) DO UPDATE
SET daily_tokens = excluded.daily_tokens, monthly_tokens = excluded.monthly_tokens,
    daily_cost_nanos = excluded.daily_cost_nanos,
    monthly_cost_nanos = excluded.monthly_cost_nanos,
    warn_fraction = excluded.warn_fraction, updated_at = now()
RETURNING daily_tokens, monthly_tokens, daily_cost_nanos, monthly_cost_nanos, warn_fraction
"""


def _budget(row: Mapping[str, Any]) -> ProjectBudget:
    return ProjectBudget(
        **{limit: row[limit] for limit in LIMITS},
        warn_fraction=row["warn_fraction"] or DEFAULT_WARN_FRACTION,
    )


def _usage(row: Mapping[str, Any]) -> ProjectUsage:
    return ProjectUsage(**{name: row[name] for name in ProjectUsage.__dataclass_fields__})


class BudgetStore:
    """``kb.project_budgets`` and ``kb.project_usage``; every statement takes the project."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def read(
        self, project_id: str, root_run_id: str | None = None
    ) -> tuple[ProjectBudget, ProjectUsage, asyncpg.Record]:
        """The project's budget (no limits when none was set), its usage, and the row, which
        also holds the tree's cost limit and live cost when ``root_run_id`` roots one."""
        row = await self._pool.fetchrow(_READ, project_id, root_run_id)
        assert row is not None  # the FROM is one constant row
        return _budget(row), _usage(row), row

    async def set(self, project_id: str, budget: ProjectBudget) -> ProjectBudget:
        """Replaces the project's limits with ``budget`` (checked first)."""
        budget.checked()
        row = await self._pool.fetchrow(
            _UPSERT,
            project_id,
            *(getattr(budget, limit) for limit in LIMITS),
            budget.warn_fraction,
        )
        return _budget(row)

    async def first_warning(self, project_id: str, limit: str) -> bool:
        """Marks the period of ``limit`` warned; whether this call was the first to."""
        period = "day" if limit.startswith("daily") else "month"
        return await self._pool.fetchval(_MARK_WARNED, project_id, period) is not None


def tree_verdict(row: Mapping[str, Any]) -> Reached | None:
    """The tree's cost limit when its runs' cost has reached it; pure."""
    limit = row["max_tree_cost_nanos"]
    if limit is None or row["tree_cost_nanos"] < limit:
        return None
    return Reached(limit="tree_cost_nanos", used=int(row["tree_cost_nanos"]), budget=limit)


def _event(run: RunRecord, kind: events.SafetyKindName, reached: Reached, step: int) -> Any:
    if kind == "budget_stop":
        what = "tree cost limit" if reached.limit == "tree_cost_nanos" else "project budget"
        message = (
            f"{what} reached: {reached.describe()}; the run is paused and ResumeRun "
            "continues it once the budget resets or is raised"
        )
    else:
        message = f"project budget warning: {reached.describe()}"
    return events.Safety(
        agent_name=run.agent_name,
        kind=kind,
        message=message,
        details={"limit": reached.limit, "used": reached.used, "budget": reached.budget},
        step=step,
    )


async def pause_if_over_budget(
    store: BudgetStore, recorder: RunRecorder, *, step: int, summary: str | None
) -> tuple[bool, RunRecord | None]:
    """Before a model call: (True, the paused row) when a project limit is reached, else
    (False, None), with the period's warning emitted by the first run past it."""
    run = recorder.run
    budget, usage, row = await store.read(run.project_id, run.root_run_id)
    stop, warning = verdict(budget, usage)
    stop = stop or tree_verdict(row)
    if (
        warning is not None
        and stop is None
        and await store.first_warning(run.project_id, warning.limit)
    ):
        await recorder.record_note(step=step, batch=[_event(run, "budget_warning", warning, step)])
    if stop is None:
        return False, None
    metrics.record_budget_pause(project=run.project_id, limit=stop.limit)
    event = _event(run, "budget_stop", stop, step)
    paused = await complete_then_cancel(
        recorder.record_finish(
            status="paused", reason=event.message, summary=summary, extra_events=[event]
        )
    )
    return True, paused
