"""The migration files themselves, checked without a database."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agentfleet.postgres.migrate import (
    DEFAULT_MIGRATIONS_DIR,
    Migration,
    MigrationError,
    MigrationName,
    discover_migrations,
    parse_migration_names,
)


def both(*stems: str) -> list[str]:
    return [f"{stem}.{side}.sql" for stem in stems for side in ("up", "down")]


def test_well_formed_names_parse_in_version_order() -> None:
    names = [*both("0002_runs", "0001_extensions", "0003_tools_secrets"), "README.md"]

    assert parse_migration_names(names) == [
        MigrationName(version=1, name="extensions"),
        MigrationName(version=2, name="runs"),
        MigrationName(version=3, name="tools_secrets"),
    ]


def test_an_empty_folder_has_no_migrations() -> None:
    assert parse_migration_names([]) == []


@pytest.mark.parametrize(
    ("names", "problem"),
    [
        (["0001_a.up.sql"], "0001_a: no .down.sql"),
        (["0001_a.down.sql"], "0001_a: no .up.sql"),
        (both("0001_a", "0003_c"), "missing 0002"),
        (both("0002_b"), "missing 0001"),
        (both("0000_zero", "0001_a"), "start at 0001"),
        (both("0001_a", "0001_b"), "several names: a, b"),
        ([*both("0001_a"), "1_b.up.sql"], "1_b.up.sql: not NNNN_lowercase_name"),
        ([*both("0001_a"), "0002_Bad-Name.up.sql"], "0002_Bad-Name.up.sql: not"),
        ([*both("0001_a"), "0002_b.sideways.sql"], "0002_b.sideways.sql: not"),
    ],
)
def test_inconsistent_folders_are_refused_naming_the_problem(
    names: list[str], problem: str
) -> None:
    with pytest.raises(MigrationError, match=re.escape(problem)):
        parse_migration_names(names)


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(MigrationError) as caught:
        parse_migration_names(["0001_a.up.sql", "0003_c.down.sql", "x.sql"])

    message = caught.value.message
    assert "0001_a: no .down.sql" in message
    assert "0003_c: no .up.sql" in message
    assert "missing 0002" in message
    assert "x.sql" in message


def test_discover_reads_both_sides(tmp_path: Path) -> None:
    (tmp_path / "0001_first.up.sql").write_text("CREATE TABLE kb.t (id int);")
    (tmp_path / "0001_first.down.sql").write_text("DROP TABLE kb.t;")

    [migration] = discover_migrations(tmp_path)

    assert (migration.version, migration.name, migration.label) == (1, "first", "0001_first")
    assert migration.up_sql == "CREATE TABLE kb.t (id int);"
    assert migration.down_sql == "DROP TABLE kb.t;"


def test_discover_refuses_a_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(MigrationError, match="migrations folder not found"):
        discover_migrations(tmp_path / "nowhere")


def test_the_repository_migrations_are_consistent() -> None:
    migrations = discover_migrations()

    assert DEFAULT_MIGRATIONS_DIR.name == "migrations"
    assert [m.version for m in migrations] == list(range(1, len(migrations) + 1))
    assert len(migrations) >= 6


def _created(sql: str, kind: str) -> set[str]:
    return set(re.findall(rf"CREATE {kind} (kb\.\w+)", sql))


def _dropped(sql: str, kind: str) -> set[str]:
    return set(re.findall(rf"DROP {kind} (?:IF EXISTS )?(kb\.\w+)", sql))


@pytest.mark.parametrize("migration", discover_migrations(), ids=lambda m: m.label)
def test_each_down_drops_what_its_up_creates(migration: Migration) -> None:
    for kind in ("TABLE", "FUNCTION", "TYPE", "SEQUENCE", "VIEW"):
        assert _created(migration.up_sql, kind) == _dropped(migration.down_sql, kind), kind
    for extension in re.findall(r"CREATE EXTENSION (?:IF NOT EXISTS )?(\w+)", migration.up_sql):
        assert re.search(rf"DROP EXTENSION (?:IF EXISTS )?{extension}\b", migration.down_sql)


@pytest.mark.parametrize("migration", discover_migrations(), ids=lambda m: m.label)
def test_objects_live_in_the_kb_schema(migration: Migration) -> None:
    unqualified = re.findall(
        r"CREATE\s+(?:UNIQUE\s+)?(?:TABLE|INDEX\s+\w+\s+ON|FUNCTION|VIEW|TYPE)\s+(?!kb\.)(\S+)",
        migration.up_sql,
    )
    assert unqualified == []
