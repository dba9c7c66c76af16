"""History retention on a real database (services.history.retention): what a prune deletes,
what it always keeps, in batches, and one project's setting never touching another's rows."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

import asyncpg
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from agentfleet.observability import metrics
from agentfleet.postgres.db import transaction
from services.history import prune_sql
from services.history.retention import HistoryRetention
from tests.integration.retention_rows import finished_tree, rows_of, surviving

PROJECT = "proj"
OTHER = "other"


async def task_object(pool: asyncpg.Pool, project: str) -> str:
    return str(
        await pool.fetchval(
            "INSERT INTO kb.graph_objects (project_id, type, properties)"
            " VALUES ($1, 'SpecTask', '{}') RETURNING id",
            project,
        )
    )


async def test_old_finished_trees_go_with_their_rows_the_rest_stays(db_pool: asyncpg.Pool) -> None:
    retention = HistoryRetention(pool=db_pool, default_days=30)
    old = await finished_tree(db_pool, PROJECT, age_days=40, children=2)
    failed = await finished_tree(db_pool, PROJECT, age_days=31, status="failed")
    recent = await finished_tree(db_pool, PROJECT, age_days=10)
    paused = await finished_tree(db_pool, PROJECT, age_days=40, status="paused")
    running = await finished_tree(db_pool, PROJECT, age_days=40, status="running")
    waiting = await finished_tree(db_pool, PROJECT, age_days=40, status="waiting")
    task = await finished_tree(
        db_pool, PROJECT, age_days=40, task_id=await task_object(db_pool, PROJECT)
    )
    # A tree whose child still runs is kept whole.
    busy_tree = await finished_tree(db_pool, PROJECT, age_days=40, children=1)
    await db_pool.execute(
        "UPDATE kb.agent_runs SET status = 'running', completed_at = NULL, lease_owner = 'w',"
        " lease_expires_at = now() + interval '1 hour' WHERE id = $1::uuid",
        busy_tree[1],
    )
    # A thread with a recent turn keeps its old turns; a thread all old goes.
    live_thread_old = await finished_tree(db_pool, PROJECT, age_days=40, thread_id="t-live")
    live_thread_new = await finished_tree(db_pool, PROJECT, age_days=1, thread_id="t-live")
    dead_thread = await finished_tree(db_pool, PROJECT, age_days=50, thread_id="t-dead")
    dead_thread += await finished_tree(db_pool, PROJECT, age_days=45, thread_id="t-dead")
    kept = [
        *recent, *paused, *running, *waiting, *task, *busy_tree, *live_thread_old,
        *live_thread_new,
    ]  # fmt: skip
    gone = [*old, *failed, *dead_thread]
    before = await rows_of(db_pool, kept)

    dry = await retention.prune(PROJECT, dry_run=True)
    assert (dry.runs, dry.messages, dry.tool_calls, dry.events) == (
        len(gone),
        len(gone),
        len(gone),
        len(gone),
    )
    assert await surviving(db_pool, gone) == set(gone)  # a dry run deletes nothing

    totals = await retention.prune(PROJECT, dry_run=False)
    assert (totals.runs, totals.messages, totals.tool_calls, totals.events) == (
        len(gone),
        len(gone),
        len(gone),
        len(gone),
    )
    assert totals.keep_days == 30
    assert not totals.more
    assert await surviving(db_pool, gone) == set()
    assert await rows_of(db_pool, gone) == dict.fromkeys(before, 0)
    assert await surviving(db_pool, kept) == set(kept)
    assert await rows_of(db_pool, kept) == before
    assert (await retention.prune(PROJECT, dry_run=False)).runs == 0


async def test_batches_walk_past_kept_runs_and_stop_at_the_budget(db_pool: asyncpg.Pool) -> None:
    """Batches of 2 roots: the oldest roots are kept (tasks), the prunable ones behind them
    are still reached; a budget of 3 roots deletes the 3 oldest and says more are left."""
    retention = HistoryRetention(pool=db_pool, default_days=1, batch_roots=2)
    kept = []
    for _ in range(3):
        kept += await finished_tree(
            db_pool, PROJECT, age_days=90, task_id=await task_object(db_pool, PROJECT)
        )
    prunable = [(await finished_tree(db_pool, PROJECT, age_days=10 - i))[0] for i in range(5)]
    first = await retention.prune(PROJECT, dry_run=False, max_roots=3)
    assert first.more
    assert first.runs == 3
    assert await surviving(db_pool, prunable) == set(prunable[3:])
    rest = await retention.prune(PROJECT, dry_run=False)
    assert rest.runs == 2
    assert not rest.more
    assert await surviving(db_pool, kept) == set(kept)


async def test_a_projects_retention_touches_only_its_rows(db_pool: asyncpg.Pool) -> None:
    retention = HistoryRetention(pool=db_pool, default_days=0)  # the deployment keeps all
    mine = await finished_tree(db_pool, PROJECT, age_days=5, children=1)
    theirs = await finished_tree(db_pool, OTHER, age_days=500, children=1)
    assert (await retention.prune(PROJECT, dry_run=False)).keep_days == 0
    assert await retention.set_keep_days(PROJECT, 2) == (2, True)
    assert await retention.keep_days(OTHER) == (0, False)
    assert (await retention.prune(PROJECT, dry_run=False)).runs == 2
    assert await surviving(db_pool, mine) == set()
    assert await surviving(db_pool, theirs) == set(theirs)
    assert await retention.prune_all() == 0  # the background pass: OTHER keeps all
    assert await surviving(db_pool, theirs) == set(theirs)
    assert await retention.set_keep_days(PROJECT, None) == (0, False)


async def test_the_background_pass_prunes_every_project_by_its_setting(
    db_pool: asyncpg.Pool,
) -> None:
    retention = HistoryRetention(pool=db_pool, default_days=30)
    mine = await finished_tree(db_pool, PROJECT, age_days=40)
    theirs = await finished_tree(db_pool, OTHER, age_days=40)
    await retention.set_keep_days(OTHER, 0)
    assert await retention.prune_all() == 1
    assert await surviving(db_pool, mine) == set()
    assert await surviving(db_pool, theirs) == set(theirs)


async def test_a_batch_reads_the_prune_index(db_pool: asyncpg.Pool) -> None:
    """Each batch is the head of one range of agent_runs_prune_idx, not a scan of the
    project's runs."""
    async with transaction(db_pool) as conn:
        await conn.execute("SET LOCAL enable_seqscan = off")
        plan = await conn.fetchval(
            "EXPLAIN (FORMAT JSON) " + prune_sql.COUNT_BATCH,
            PROJECT,
            datetime.now(UTC),
            datetime.min.replace(tzinfo=UTC),
            prune_sql.NIL_UUID,
            100,
        )
    assert "agent_runs_prune_idx" in json.dumps(plan)


async def test_the_background_job_prunes_and_counts_the_rows(
    db_pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job's pass deletes an old tree and adds its rows to agentfleet.history.pruned,
    by project and table; it stops when told."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    instruments = metrics.Instruments(provider.get_meter("test"), metrics.ObservedState())
    monkeypatch.setattr(metrics, "_instruments", instruments)
    old = await finished_tree(db_pool, PROJECT, age_days=40, children=2)
    passed = asyncio.Event()

    class Observed(HistoryRetention):
        async def prune_all(self) -> int:
            deleted = await super().prune_all()
            passed.set()
            return deleted

    retention = Observed(pool=db_pool, default_days=30, interval_s=0.05)
    stopping = asyncio.Event()
    async with asyncio.TaskGroup() as group:
        group.create_task(retention.run(stopping))
        async with asyncio.timeout(10):
            await passed.wait()
        stopping.set()
    assert await surviving(db_pool, old) == set()
    pruned: dict[tuple[str, str], int] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == "agentfleet.history.pruned":
                    for point in metric.data.data_points:
                        key = (point.attributes["agentfleet.project_id"],
                               point.attributes["agentfleet.table"])  # fmt: skip
                        pruned[key] = int(point.value)
    provider.shutdown()
    assert pruned == {
        (PROJECT, "agent_runs"): 3,
        (PROJECT, "agent_run_messages"): 3,
        (PROJECT, "agent_run_tool_calls"): 3,
        (PROJECT, "agent_run_events"): 3,
    }
