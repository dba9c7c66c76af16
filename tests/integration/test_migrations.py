"""Migrations against a real PostgreSQL: up, down to zero, up again, status, concurrency."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest
import pytest_asyncio

from agentfleet.postgres import db
from agentfleet.postgres.migrate import (
    ADVISORY_LOCK_KEY,
    MigrationError,
    discover_migrations,
    migrate_down,
    migrate_up,
    migration_status,
)
from agentfleet.testing.database import DatabaseFactory

# DESIGN §3, column for column (tables may have more, e.g. updated_at).
DESIGN_COLUMNS = {
    "agent_definitions": {
        "id", "project_id", "name", "description", "system_prompt", "model", "tools",
        "flow_type", "sub_agents", "max_iterations", "max_steps", "default_timeout_s",
        "visibility", "is_default", "tags", "trigger", "config", "product_id", "version",
        "created_at", "updated_at",
    },
    "products": {"id", "project_id", "name", "version", "manifest", "installed_at"},
    "agent_runs": {
        "id", "project_id", "agent_definition_id", "agent_name", "status", "input", "summary",
        "error_message", "parent_run_id", "root_run_id", "depth", "step_count", "total_steps",
        "resume_count", "max_steps", "timeout", "tokens_in", "tokens_out", "tokens_total_tree",
        "trace_id", "task_id", "request_id", "lease_owner", "lease_expires_at",
        "cancel_requested_at", "created_at", "started_at", "completed_at", "duration_ms",
        "trace_parent", "cost_nanos", "cost_total_tree_nanos", "max_tree_cost_nanos",
        "started_by", "trigger_origin", "chain_depth",
    },
    "agent_run_messages": {
        "id", "run_id", "seq", "step_number", "role", "agent_name", "content", "tokens",
        "is_internal", "created_at", "model_name", "cost_nanos",
    },
    "agent_run_tool_calls": {
        "id", "run_id", "message_id", "tool_call_id", "step_number", "tool_name", "source",
        "input", "output", "status", "error", "duration_ms", "created_at",
    },
    "agent_run_events": {
        "run_id", "seq", "root_run_id", "type", "agent_name", "is_internal", "payload",
        "created_at",
    },
    "mcp_servers": {
        "id", "project_id", "name", "transport", "command", "args", "env", "url", "headers",
        "tool_prefix", "enabled", "connect_timeout_s", "call_timeout_s",
    },
    "project_secrets": {"id", "project_id", "name", "value"},
    "graph_objects": {
        "id", "project_id", "type", "key", "properties", "status", "version", "search",
        "created_at", "updated_at",
    },
    "graph_relationships": {"id", "project_id", "type", "src_id", "dst_id", "properties"},
    "api_tokens": {"id", "token_hash", "project_id", "role", "name", "created_at", "revoked_at"},
    "product_install_requests": {
        "project_id", "request_id", "product_name", "response", "created_at",
    },
    "project_budgets": {
        "project_id", "daily_tokens", "monthly_tokens", "daily_cost_nanos", "monthly_cost_nanos",
        "warn_fraction", "updated_at",
    },
    "project_usage": {"project_id", "period", "period_start", "tokens", "cost_nanos", "warned"},
}  # fmt: skip

EXPECTED_INDEXES = {
    "agent_definitions": {
        "agent_definitions_pkey", "agent_definitions_project_name_key",
        "agent_definitions_product_idx", "agent_definitions_trigger_idx",
    },
    "products": {"products_pkey", "products_project_name_key"},
    "agent_runs": {
        "agent_runs_pkey", "agent_runs_project_created_idx",
        "agent_runs_project_agent_created_idx", "agent_runs_project_status_created_idx",
        "agent_runs_parent_created_idx", "agent_runs_root_created_idx",
        "agent_runs_queued_project_idx",
        "agent_runs_running_lease_idx", "agent_runs_request_id_uidx", "agent_runs_task_idx",
        "agent_runs_definition_idx", "agent_runs_thread_idx", "agent_runs_thread_active_idx",
        "agent_runs_prune_idx",
        "agent_runs_project_started_by_created_idx", "agent_runs_queued_triggered_idx",
    },
    "agent_run_messages": {"agent_run_messages_pkey", "agent_run_messages_run_seq_key"},
    "agent_run_tool_calls": {
        "agent_run_tool_calls_pkey", "agent_run_tool_calls_run_created_idx",
        "agent_run_tool_calls_message_idx", "agent_run_tool_calls_run_call_uidx",
        "agent_run_tool_calls_awaiting_idx",
    },
    "agent_run_events": {"agent_run_events_pkey"},
    "agent_run_resume_requests": {"agent_run_resume_requests_pkey"},
    "mcp_servers": {
        "mcp_servers_pkey", "mcp_servers_project_name_key", "mcp_servers_product_idx",
    },
    "project_secrets": {"project_secrets_pkey", "project_secrets_project_name_key"},
    "remote_agents": {
        "remote_agents_pkey", "remote_agents_project_name_key", "remote_agents_product_idx",
    },
    "graph_objects": {
        "graph_objects_pkey", "graph_objects_type_status_idx", "graph_objects_type_created_idx",
        "graph_objects_key_uidx", "graph_objects_properties_idx", "graph_objects_search_idx",
        "graph_objects_search_trgm_idx", "graph_objects_pending_spectasks_idx",
        "graph_objects_ready_spectasks_idx", "graph_objects_ready_spectasks_project_idx",
        "graph_objects_ready_spectasks_graph_idx",
        "graph_objects_inprogress_spectasks_idx",
        "graph_objects_spectask_graph_idx",
    },
    "graph_relationships": {
        "graph_relationships_pkey", "graph_relationships_src_uidx", "graph_relationships_dst_idx",
    },
    "task_graph_states": {"task_graph_states_pkey", "task_graph_states_page_idx"},
    "project_retention": {"project_retention_pkey"},
    "run_queue_counts": {"run_queue_counts_pkey"},
    "run_queue_deltas": {"run_queue_deltas_project_idx"},
    "api_tokens": {"api_tokens_pkey", "api_tokens_token_hash_key"},
    "product_install_requests": {"product_install_requests_pkey"},
    "project_budgets": {"project_budgets_pkey"},
    "project_usage": {"project_usage_pkey"},
    "schema_migrations": {"schema_migrations_pkey"},
    "model_quota_budgets": {"model_quota_budgets_pkey"},
    "trigger_outbox": {
        "trigger_outbox_pkey", "trigger_outbox_pending_idx", "trigger_outbox_request_id_uidx",
        "trigger_outbox_schedule_tick_uidx", "trigger_outbox_consumed_idx",
    },
    "trigger_schedules": {
        "trigger_schedules_pkey", "trigger_schedules_project_name_key",
        "trigger_schedules_due_idx", "trigger_schedules_definition_uidx",
    },
    "trigger_firings": {
        "trigger_firings_pkey", "trigger_firings_outbox_agent_uidx",
        "trigger_firings_project_created_idx", "trigger_firings_run_idx",
    },
}  # fmt: skip


@pytest_asyncio.fixture(loop_scope="session")
async def empty_database_url(database_factory: DatabaseFactory) -> AsyncIterator[str]:
    url = await database_factory.create_database(migrated=False)
    try:
        yield url
    finally:
        await database_factory.drop_database(url)


async def _schema(conn: asyncpg.Connection) -> dict[str, object]:
    tables = await conn.fetch(
        "SELECT table_name FROM information_schema.tables"
        " WHERE table_schema = 'kb' AND table_type = 'BASE TABLE'"
    )
    views = await conn.fetch(
        "SELECT table_name FROM information_schema.views WHERE table_schema = 'kb'"
    )
    columns = await conn.fetch(
        "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'kb'"
    )
    indexes = await conn.fetch(
        "SELECT tablename, indexname FROM pg_indexes WHERE schemaname = 'kb'"
    )
    functions = await conn.fetch(
        "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
        " WHERE n.nspname = 'kb'"
    )
    extensions = await conn.fetch("SELECT extname FROM pg_extension WHERE extname <> 'plpgsql'")
    by_table: dict[str, set[str]] = {}
    for row in columns:
        by_table.setdefault(row["table_name"], set()).add(row["column_name"])
    index_by_table: dict[str, set[str]] = {}
    for row in indexes:
        index_by_table.setdefault(row["tablename"], set()).add(row["indexname"])
    return {
        "tables": {row["table_name"] for row in tables},
        "views": {row["table_name"] for row in views},
        "columns": by_table,
        "indexes": index_by_table,
        "functions": {row["proname"] for row in functions},
        "extensions": {row["extname"] for row in extensions},
    }


async def test_up_down_to_zero_and_up_again(empty_database_url: str) -> None:
    all_versions = [m.version for m in discover_migrations()]

    applied = await migrate_up(empty_database_url)
    assert [m.version for m in applied] == all_versions

    conn = await db.connect(empty_database_url)
    try:
        schema = await _schema(conn)
        assert schema["tables"] == set(EXPECTED_INDEXES)
        assert schema["views"] == {"agent_run_events_shown"}
        columns = schema["columns"]
        assert isinstance(columns, dict)
        for table, expected in DESIGN_COLUMNS.items():
            assert expected <= columns[table], (table, expected - columns[table])
        assert schema["indexes"] == EXPECTED_INDEXES
        assert "pg_trgm" in schema["extensions"]  # type: ignore[operator]

        reverted = await migrate_down(empty_database_url)
        assert [m.version for m in reverted] == list(reversed(all_versions))
        empty = await _schema(conn)
        assert empty["tables"] == {"schema_migrations"}
        assert empty["views"] == set()
        assert empty["functions"] == set()
        assert empty["extensions"] == set()
        assert await conn.fetchval("SELECT count(*) FROM kb.schema_migrations") == 0

        again = await migrate_up(empty_database_url)
        assert [m.version for m in again] == all_versions
        assert await _schema(conn) == schema
    finally:
        await conn.close()


async def test_nothing_to_do_when_up_to_date(database_url: str) -> None:
    assert await migrate_up(database_url) == []
    assert await migrate_down(database_url, target=len(discover_migrations())) == []


async def test_status_and_targets(empty_database_url: str) -> None:
    migrations = discover_migrations()
    before = await migration_status(empty_database_url)
    assert [(m.version, at) for m, at in before] == [(m.version, None) for m in migrations]

    applied = await migrate_up(empty_database_url, target=3)
    assert [m.version for m in applied] == [1, 2, 3]
    status = await migration_status(empty_database_url)
    assert [at is not None for _, at in status] == [m.version <= 3 for m in migrations]

    with pytest.raises(MigrationError, match="migrate down"):
        await migrate_up(empty_database_url, target=2)
    with pytest.raises(MigrationError, match="not between 0 and"):
        await migrate_up(empty_database_url, target=len(migrations) + 1)

    reverted = await migrate_down(empty_database_url, target=1)
    assert [m.version for m in reverted] == [3, 2]
    status = await migration_status(empty_database_url)
    assert [at is not None for _, at in status] == [m.version <= 1 for m in migrations]

    rest = await migrate_up(empty_database_url)
    assert [m.version for m in rest] == [m.version for m in migrations[1:]]
    assert all(at is not None for _, at in await migration_status(empty_database_url))


async def test_concurrent_migrate_up_applies_each_migration_once(empty_database_url: str) -> None:
    results = await asyncio.gather(*(migrate_up(empty_database_url) for _ in range(4)))

    applied = sorted(m.version for result in results for m in result)
    assert applied == [m.version for m in discover_migrations()]
    # One caller did the work under the lock; the others found nothing left to do.
    assert sorted(len(result) for result in results)[:-1] == [0, 0, 0]


async def test_a_failing_migration_leaves_no_trace(empty_database_url: str, tmp_path: Path) -> None:
    (tmp_path / "0001_good.up.sql").write_text("CREATE TABLE kb.good (id int);")
    (tmp_path / "0001_good.down.sql").write_text("DROP TABLE kb.good;")
    (tmp_path / "0002_bad.up.sql").write_text(
        "CREATE TABLE kb.half (id int);\nSELECT no_such_function();"
    )
    (tmp_path / "0002_bad.down.sql").write_text("DROP TABLE kb.half;")

    with pytest.raises(MigrationError, match=r"0002_bad\.up\.sql failed: .*no_such_function"):
        await migrate_up(empty_database_url, directory=tmp_path)

    status = await migration_status(empty_database_url, directory=tmp_path)
    assert [(m.label, at is not None) for m, at in status] == [
        ("0001_good", True),
        ("0002_bad", False),
    ]
    conn = await db.connect(empty_database_url)
    try:
        assert await conn.fetchval("SELECT to_regclass('kb.half')") is None
        assert await conn.fetchval("SELECT to_regclass('kb.good')") is not None
    finally:
        await conn.close()


async def test_a_database_newer_than_the_files_is_refused(
    empty_database_url: str, tmp_path: Path
) -> None:
    (tmp_path / "0001_only.up.sql").write_text("SELECT 1;")
    (tmp_path / "0001_only.down.sql").write_text("SELECT 1;")
    await migrate_up(empty_database_url)  # the repository's, several versions

    with pytest.raises(MigrationError, match="not among the files"):
        await migrate_up(empty_database_url, directory=tmp_path)
    with pytest.raises(MigrationError, match="not among the files"):
        await migration_status(empty_database_url, directory=tmp_path)


async def test_a_renamed_migration_is_refused(empty_database_url: str, tmp_path: Path) -> None:
    await migrate_up(empty_database_url, target=1)
    (tmp_path / "0001_renamed.up.sql").write_text("SELECT 1;")
    (tmp_path / "0001_renamed.down.sql").write_text("SELECT 1;")

    with pytest.raises(
        MigrationError, match="has 0001_extensions where the files have 0001_renamed"
    ):
        await migrate_up(empty_database_url, directory=tmp_path)


async def test_migrate_accepts_an_open_connection(empty_database_url: str) -> None:
    conn = await db.connect(empty_database_url)
    try:
        applied = await migrate_up(conn, target=1)
        assert [m.version for m in applied] == [1]
        # The advisory lock was released: another session can take it at once.
        other = await db.connect(empty_database_url)
        try:
            assert await other.fetchval("SELECT pg_try_advisory_lock($1)", ADVISORY_LOCK_KEY)
        finally:
            await other.close()
    finally:
        await conn.close()
