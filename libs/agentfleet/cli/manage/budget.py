"""``agentfleet budget show|set``: a project's budgets and its usage this UTC day and month.

Cost limits are given in US dollars on the command line and sent as nano-dollars (what the
API and the database hold). ``set`` replaces every limit: one left out is removed.
"""

from __future__ import annotations

import argparse
import math
from decimal import Decimal, InvalidOperation

from rich.table import Table

from agentfleet.cli.client import CliError, Connection
from agentfleet.cli.render import console, print_json
from agentfleet.settings.model_prices import NANOS_PER_USD, usd
from agentfleet.v1 import registry_pb2

_LIMITS = ("daily_tokens", "monthly_tokens", "daily_cost_nanos", "monthly_cost_nanos")


def add_budget_arguments(set_: argparse.ArgumentParser) -> None:
    set_.add_argument("--daily-tokens", type=int, help="tokens per UTC day")
    set_.add_argument("--monthly-tokens", type=int, help="tokens per UTC month")
    set_.add_argument("--daily-usd", help="cost per UTC day, in US dollars (e.g. 12.50)")
    set_.add_argument("--monthly-usd", help="cost per UTC month, in US dollars")
    set_.add_argument(
        "--warn-at", type=float, help="fraction of a limit that emits a warning (default 0.8)"
    )


def dollars_to_nanos(raw: str | None, flag: str) -> int | None:
    """``12.5`` -> 12_500_000_000; CliError naming ``flag`` for what is not a plain number."""
    if raw is None:
        return None
    try:
        value = Decimal(raw)
    except InvalidOperation:
        raise CliError("INVALID_ARGUMENT", f"{flag}: not a number of dollars: {raw!r}") from None
    if not value.is_finite():
        raise CliError("INVALID_ARGUMENT", f"{flag}: not a number of dollars: {raw!r}")
    return int(value * NANOS_PER_USD)


async def budget(conn: Connection, args: argparse.Namespace) -> int:
    registry = conn.registry()
    if args.budget_command == "set":
        limits = {
            "daily_tokens": args.daily_tokens,
            "monthly_tokens": args.monthly_tokens,
            "daily_cost_nanos": dollars_to_nanos(args.daily_usd, "--daily-usd"),
            "monthly_cost_nanos": dollars_to_nanos(args.monthly_usd, "--monthly-usd"),
        }
        if args.warn_at is not None and not math.isfinite(args.warn_at):
            raise CliError("INVALID_ARGUMENT", f"--warn-at: not a fraction: {args.warn_at}")
        budget_ = registry_pb2.ProjectBudget(
            **{name: value for name, value in limits.items() if value is not None}
        )
        if args.warn_at is not None:
            budget_.warn_fraction = args.warn_at
        await registry.SetProjectBudget(
            registry_pb2.SetProjectBudgetRequest(project_id=conn.project, budget=budget_)
        )
    reply = await registry.GetProjectBudget(
        registry_pb2.GetProjectBudgetRequest(project_id=conn.project)
    )
    if args.json:
        print_json(reply)
        return 0
    _print(reply)
    return 0


def _print(reply: registry_pb2.GetProjectBudgetResponse) -> None:
    budget_, usage = reply.budget, reply.usage
    used = {
        "daily_tokens": usage.day_tokens,
        "monthly_tokens": usage.month_tokens,
        "daily_cost_nanos": usage.day_cost_nanos,
        "monthly_cost_nanos": usage.month_cost_nanos,
    }
    table = Table("limit", "used", "budget", box=None)
    for name in _LIMITS:
        money = name.endswith("cost_nanos")
        shown = usd if money else str
        limit = shown(getattr(budget_, name)) if budget_.HasField(name) else "none"
        table.add_row(name.removesuffix("_nanos"), shown(used[name]), limit)
    console.print(table)
    console.print(f"warning at {budget_.warn_fraction:g} of a limit")
