"""The triggers' upkeep on a real database: the history prune deletes old firings (with the
project's retention) and old consumed outbox events (AGENTFLEET_TRIGGER_OUTBOX_RETENTION_HOURS)
in batches, never an unconsumed event nor a recent one; and the executor's sampler reports the
outbox backlog as two unlabelled gauges."""

from __future__ import annotations

import asyncpg
import pytest
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client import CollectorRegistry

from agentfleet.observability import metrics
from agentfleet.observability.metrics_export import sample_executor
from services.executor.triggers import store
from services.history import trigger_prune
from services.history.retention import HistoryRetention

PROJECT = "proj"
KEEPER = "keeper"  # retention forever: its rows always stay


async def event(
    pool: asyncpg.Pool,
    project: str,
    *,
    age_h: float,
    consumed_h: float | None,
    request_id: str | None = None,
) -> int:
    """An outbox event made ``age_h`` hours ago, consumed ``consumed_h`` hours ago (None: not)."""
    return int(
        await pool.fetchval(
            """
            INSERT INTO kb.trigger_outbox (project_id, kind, event_name, request_id,
                                           request_fingerprint, payload, created_at, consumed_at)
            VALUES ($1, 'event', 'ping', $2, 'fp', '{}'::jsonb,
                    now() - make_interval(secs => $3::float8 * 3600),
                    CASE WHEN $4::float8 IS NOT NULL
                         THEN now() - make_interval(secs => $4 * 3600) END)
            RETURNING id
            """,
            project,
            request_id,
            age_h,
            consumed_h,
        )
    )


async def firing(pool: asyncpg.Pool, project: str, outbox_id: int, *, age_days: float) -> str:
    return str(
        await pool.fetchval(
            """
            INSERT INTO kb.trigger_firings (project_id, outbox_id, agent_name, trigger, outcome,
                                            reason, created_at)
            VALUES ($1, $2::bigint, 'a' || $2::text, 'on_event:ping', 'skipped', 'rate_cap: test',
                    now() - make_interval(secs => $3::float8 * 86400))
            RETURNING id
            """,
            project,
            outbox_id,
            age_days,
        )
    )


async def ids(pool: asyncpg.Pool, table: str) -> set[str]:
    return {str(r["id"]) for r in await pool.fetch(f"SELECT id FROM kb.{table}")}


async def test_old_firings_and_consumed_events_go_the_rest_stays(db_pool: asyncpg.Pool) -> None:
    await db_pool.execute(
        "INSERT INTO kb.project_retention (project_id, keep_days) VALUES ($1, 0)", KEEPER
    )
    retention = HistoryRetention(pool=db_pool, default_days=30, outbox_keep_hours=24)
    old_consumed = await event(db_pool, PROJECT, age_h=50, consumed_h=49, request_id="r-old")
    old_pending = await event(db_pool, PROJECT, age_h=50, consumed_h=None)
    # Made long ago but consumed within the window: EmitEvent's request_id still holds.
    late_consumed = await event(db_pool, PROJECT, age_h=50, consumed_h=2, request_id="r-late")
    fresh = await event(db_pool, PROJECT, age_h=1, consumed_h=1)
    other_old = await event(db_pool, KEEPER, age_h=50, consumed_h=49)
    old_firing = await firing(db_pool, PROJECT, old_consumed, age_days=40)
    new_firing = await firing(db_pool, PROJECT, late_consumed, age_days=10)
    keeper_firing = await firing(db_pool, KEEPER, other_old, age_days=400)

    counted = await retention.prune(PROJECT, dry_run=True)
    assert counted.trigger_firings == 1
    assert await ids(db_pool, "trigger_firings") == {old_firing, new_firing, keeper_firing}

    await retention.prune_all()
    assert await ids(db_pool, "trigger_firings") == {new_firing, keeper_firing}
    # The outbox is the consumers' bookkeeping: its window is the deployment's, for every
    # project; what was never consumed stays, however old.
    assert await ids(db_pool, "trigger_outbox") == {
        str(old_pending),
        str(late_consumed),
        str(fresh),
    }
    # Within the window a repeated request_id is the same event; after it, a new one.
    kept = await store.insert_event(
        db_pool, project_id=PROJECT, name="ping", payload={}, request_id="r-late",
        request_fingerprint="fp",
    )  # fmt: skip
    assert kept == (late_consumed, False, "fp")
    again = await store.insert_event(
        db_pool, project_id=PROJECT, name="ping", payload={}, request_id="r-old",
        request_fingerprint="fp",
    )  # fmt: skip
    assert again[1] is True
    assert again[0] != old_consumed


async def test_a_project_with_only_firings_is_pruned_too(db_pool: asyncpg.Pool) -> None:
    # No run at all (every firing skipped): the pass still visits the project.
    outbox_id = await event(db_pool, PROJECT, age_h=1, consumed_h=1)
    await firing(db_pool, PROJECT, outbox_id, age_days=40)
    assert await db_pool.fetchval("SELECT count(*) FROM kb.agent_runs") == 0
    await HistoryRetention(pool=db_pool, default_days=30).prune_all()
    assert await db_pool.fetchval("SELECT count(*) FROM kb.trigger_firings") == 0


async def test_batches_are_bounded_and_a_budget_says_more(db_pool: asyncpg.Pool) -> None:
    outbox_id = await event(db_pool, PROJECT, age_h=1, consumed_h=1)
    await db_pool.execute(
        """
        INSERT INTO kb.trigger_firings (project_id, outbox_id, agent_name, trigger, outcome,
                                        reason, created_at)
        SELECT $1, $2, 'a' || i, 'on_event:ping', 'skipped', 'rate_cap: test',
               now() - interval '40 days'
        FROM generate_series(1, 25) i
        """,
        PROJECT,
        outbox_id,
    )
    cutoff = await db_pool.fetchval("SELECT now() - interval '30 days'")
    first = await trigger_prune.prune_firings(
        db_pool, PROJECT, cutoff, dry_run=False, max_rows=10, batch_rows=4
    )
    assert (first.rows, first.more) == (10, True)
    rest = await trigger_prune.prune_firings(db_pool, PROJECT, cutoff, dry_run=False, batch_rows=4)
    assert (rest.rows, rest.more) == (15, False)
    assert await db_pool.fetchval("SELECT count(*) FROM kb.trigger_firings") == 0

    for _ in range(7):
        await event(db_pool, PROJECT, age_h=30, consumed_h=30)
    per_project, more = await trigger_prune.prune_outbox(db_pool, 24, max_rows=5, batch_rows=2)
    assert (dict(per_project), more) == ({PROJECT: 5}, True)
    per_project, more = await trigger_prune.prune_outbox(db_pool, 24, batch_rows=2)
    assert (dict(per_project), more) == ({PROJECT: 2}, False)


async def test_the_outbox_backlog_gauges(
    db_pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = CollectorRegistry()
    provider = MeterProvider(metric_readers=[PrometheusMetricReader(registry=registry)])
    instruments = metrics.Instruments(provider.get_meter("test"), metrics.ObservedState())
    monkeypatch.setattr(metrics, "_instruments", instruments)

    def value(name: str) -> tuple[float, dict[str, str]]:
        (sample,) = [s for f in registry.collect() for s in f.samples if s.name == name]
        return sample.value, sample.labels

    try:
        await sample_executor(db_pool)
        assert value("agentfleet_triggers_outbox_pending")[0] == 0
        assert value("agentfleet_triggers_outbox_oldest_age_seconds")[0] == 0
        await event(db_pool, PROJECT, age_h=0.25, consumed_h=None)
        await event(db_pool, KEEPER, age_h=0.01, consumed_h=None)
        await event(db_pool, PROJECT, age_h=5, consumed_h=4)  # consumed: not backlog
        await sample_executor(db_pool)
        pending, labels = value("agentfleet_triggers_outbox_pending")
        age, _ = value("agentfleet_triggers_outbox_oldest_age_seconds")
        assert pending == 2
        assert 900 <= age < 1000
        # No project label: tenants cannot add series.
        assert not {k for k in labels if not k.startswith("otel_scope_")}
    finally:
        provider.shutdown()
