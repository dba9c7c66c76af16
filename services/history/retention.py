"""History retention (DESIGN, Retention): how long a project keeps its finished run trees,
and the prune that removes older ones in small batches (statements in
:mod:`services.history.prune_sql`).

:class:`HistoryRetention` serves PruneHistory/SetHistoryRetention and runs the background
job (:meth:`HistoryRetention.run`): every AGENTFLEET_HISTORY_PRUNE_INTERVAL_S, each project
with a retention deletes at most :data:`PASS_ROOTS` trees, :data:`BATCH_ROOTS` per
statement, each statement its own short transaction, so writers never wait long on a prune
and a deployment with a long backlog catches up over several passes. Any number of history
replicas may prune at once: a batch skips trees another one holds. The same calls and pass
prune the triggers' rows (:mod:`services.history.trigger_prune`): a project's firings with
its retention, consumed outbox events after AGENTFLEET_TRIGGER_OUTBOX_RETENTION_HOURS.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from datetime import datetime

import asyncpg

from agentfleet.errors import InvalidArgument
from agentfleet.observability import metrics
from services.history import prune_sql, trigger_prune

log = logging.getLogger(__name__)

BATCH_ROOTS = 100
"""Top-level runs one statement reads (and at most deletes, with their trees)."""
PASS_ROOTS = 10_000
"""Top-level runs one background pass deletes at most per project."""
SCAN_FACTOR = 10
DEFAULT_CALL_ROOTS = 10_000
MAX_CALL_ROOTS = 100_000
MAX_KEEP_DAYS = 36_500


@dataclass(kw_only=True, slots=True)
class PruneTotals:
    """What a prune deleted (or, dry, would delete)."""

    runs: int = 0
    messages: int = 0
    tool_calls: int = 0
    events: int = 0
    roots: int = 0
    trigger_firings: int = 0
    keep_days: int = 0
    cutoff: datetime | None = None
    more: bool = False
    """The root budget was reached before the project's range was done."""

    def add(self, batch: prune_sql.BatchResult) -> None:
        self.runs += batch.runs
        self.messages += batch.messages
        self.tool_calls += batch.tool_calls
        self.events += batch.events
        self.roots += batch.roots


@dataclass(kw_only=True, eq=False)
class HistoryRetention:
    """The retention of each project over ``pool``; ``default_days`` is the deployment's
    AGENTFLEET_HISTORY_RETENTION_DAYS."""

    pool: asyncpg.Pool
    default_days: int
    interval_s: float = 600.0
    batch_roots: int = BATCH_ROOTS
    outbox_keep_hours: int = 168
    """AGENTFLEET_TRIGGER_OUTBOX_RETENTION_HOURS."""
    _passes: int = field(default=0, init=False)

    async def keep_days(self, project_id: str) -> tuple[int, bool]:
        """The project's retention in days (0: forever), and whether it is its own setting."""
        own = await self.pool.fetchval(
            "SELECT keep_days FROM kb.project_retention WHERE project_id = $1", project_id
        )
        return (self.default_days, False) if own is None else (int(own), True)

    async def set_keep_days(self, project_id: str, days: int | None) -> tuple[int, bool]:
        """Sets (None: clears) the project's own retention; what is then in effect."""
        if days is None:
            await self.pool.execute(prune_sql.CLEAR_KEEP_DAYS, project_id)
        else:
            if not 0 <= days <= MAX_KEEP_DAYS:
                raise InvalidArgument.for_field(
                    "keep_days", f"must be 0 (forever) to {MAX_KEEP_DAYS}, not {days}"
                )
            await self.pool.execute(prune_sql.SET_KEEP_DAYS, project_id, days)
        return await self.keep_days(project_id)

    async def prune(
        self, project_id: str, *, dry_run: bool, max_roots: int = DEFAULT_CALL_ROOTS
    ) -> PruneTotals:
        """Deletes (counts) the project's prunable trees, at most ``max_roots`` of them, in
        batches, then its trigger firings older than the same cutoff; one project's rows
        only (every statement is scoped by ``project_id``)."""
        days, _ = await self.keep_days(project_id)
        totals = PruneTotals(keep_days=days)
        if days == 0:
            return totals
        totals.cutoff = await self.pool.fetchval(prune_sql.CUTOFF, days)
        await self._prune_trees(project_id, totals, dry_run=dry_run, max_roots=max_roots)
        firings = await trigger_prune.prune_firings(
            self.pool, project_id, totals.cutoff, dry_run=dry_run
        )
        totals.trigger_firings = firings.rows
        totals.more = totals.more or firings.more
        if firings.rows and not dry_run:
            metrics.record_history_pruned(
                project=project_id, table="trigger_firings", rows=firings.rows
            )
        return totals

    async def _prune_trees(
        self, project_id: str, totals: PruneTotals, *, dry_run: bool, max_roots: int
    ) -> None:
        assert totals.cutoff is not None
        after: tuple[datetime, str] | None = None
        # Roots read are bounded too: a project whose old runs are all kept (tasks, live
        # threads) costs a call at most SCAN_FACTOR x max_roots index entries.
        scan_left = SCAN_FACTOR * max_roots
        while True:
            scan = min(self.batch_roots, max_roots - totals.roots, scan_left)
            if scan <= 0:
                totals.more = True
                return
            scan_left -= scan
            # Pool, not one connection: each batch is its own transaction, committed before
            # the next, so no lock outlives a batch.
            result = await prune_sql.batch(
                self.pool, project_id, totals.cutoff, after, scan, dry_run=dry_run
            )
            totals.add(result)
            if not dry_run:
                _record(project_id, result)
            if result.scanned < scan or result.last is None:
                return
            after = result.last

    async def prune_all(self) -> int:
        """One background pass over every project with finished runs or trigger firings,
        then the consumed outbox events; trees deleted."""
        deleted = 0
        projects = [row["project_id"] for row in await self.pool.fetch(prune_sql.PROJECTS)]
        seen = set(projects)
        for row in await self.pool.fetch(trigger_prune.FIRING_PROJECTS):
            if row["project_id"] not in seen:
                projects.append(row["project_id"])
        for project_id in projects:
            totals = await self.prune(project_id, dry_run=False, max_roots=PASS_ROOTS)
            deleted += totals.roots
            if totals.roots or totals.trigger_firings:
                log.info(
                    "pruned history",
                    extra={
                        "project_id": project_id,
                        "runs": totals.runs,
                        "events": totals.events,
                        "trigger_firings": totals.trigger_firings,
                        "more": totals.more,
                    },
                )
        outbox, _ = await trigger_prune.prune_outbox(self.pool, self.outbox_keep_hours)
        for project_id, rows in outbox.items():
            metrics.record_history_pruned(project=project_id, table="trigger_outbox", rows=rows)
        self._passes += 1
        return deleted

    async def run(self, stopping: asyncio.Event) -> None:
        """The background job: a pass every ``interval_s`` until ``stopping`` is set, the
        first one interval after the start (a service restarting in a loop does not prune
        on each start). A pass that fails (the database away) is logged and the next one
        tries again."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), self.interval_s)
            if stopping.is_set():
                return
            try:
                await self.prune_all()
            except (asyncpg.PostgresError, OSError, asyncpg.InterfaceError):
                log.warning("history prune pass failed; retrying next interval", exc_info=True)


def _record(project_id: str, batch: prune_sql.BatchResult) -> None:
    for table, rows in (
        ("agent_runs", batch.runs),
        ("agent_run_messages", batch.messages),
        ("agent_run_tool_calls", batch.tool_calls),
        ("agent_run_events", batch.events),
    ):
        if rows:
            metrics.record_history_pruned(project=project_id, table=table, rows=rows)
