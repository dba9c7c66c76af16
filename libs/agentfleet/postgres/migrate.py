"""Schema migrations: ``migrations/NNNN_name.up.sql`` + ``NNNN_name.down.sql``, applied in order.

Versions start at 1 and are contiguous; every up has a down that undoes it entirely. Each
migration runs in its own transaction together with its row in ``kb.schema_migrations``,
and every command holds a session advisory lock, so several processes (replicas starting
at once, a migration Job) can run ``migrate_up`` concurrently: one applies, the others wait
and then find nothing left to do.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import asyncpg

from agentfleet.errors import FailedPrecondition
from agentfleet.postgres import db

DEFAULT_MIGRATIONS_DIR = Path(__file__).resolve().parents[3] / "migrations"
"""``migrations/`` of the repository (libs/agentfleet/../../migrations)."""

# Any fixed bigint shared by every agentfleet process; this one spells "agentflt".
ADVISORY_LOCK_KEY = 0x6167656E74666C74

_FILE_NAME = re.compile(
    r"^(?P<version>\d{4})_(?P<name>[a-z0-9]+(?:_[a-z0-9]+)*)\.(?P<dir>up|down)\.sql$"
)

_BOOTSTRAP = """
CREATE SCHEMA IF NOT EXISTS kb;
CREATE TABLE IF NOT EXISTS kb.schema_migrations (
    version     integer PRIMARY KEY,
    name        text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
);
"""


class MigrationError(FailedPrecondition):
    """The migration files are inconsistent, or do not match what the database has applied."""


@dataclass(frozen=True, kw_only=True, slots=True)
class MigrationName:
    """A migration identified by its file names, before any file is read."""

    version: int
    name: str


@dataclass(frozen=True, kw_only=True, slots=True)
class Migration:
    version: int
    name: str
    """The part after ``NNNN_``, e.g. ``runs`` for ``0004_runs.up.sql``."""
    up_sql: str = field(repr=False)
    down_sql: str = field(repr=False)

    @property
    def label(self) -> str:
        return f"{self.version:04d}_{self.name}"


def parse_migration_names(file_names: Iterable[str]) -> list[MigrationName]:
    """Checks a folder listing and returns its migrations in version order.

    Pure: takes file names, raises :class:`MigrationError` listing every problem (malformed
    names, an up without a down or the reverse, one version with two names, gaps).
    Files that do not end in ``.sql`` are ignored.
    """
    problems: list[str] = []
    sides: dict[tuple[int, str], set[str]] = {}
    for file_name in sorted(file_names):
        if not file_name.endswith(".sql"):
            continue
        match = _FILE_NAME.match(file_name)
        if match is None:
            problems.append(f"{file_name}: not NNNN_lowercase_name.(up|down).sql")
            continue
        key = (int(match["version"]), match["name"])
        sides.setdefault(key, set()).add(match["dir"])

    names_by_version: dict[int, list[str]] = {}
    for (version, name), found in sorted(sides.items()):
        names_by_version.setdefault(version, []).append(name)
        for missing in sorted({"up", "down"} - found):
            problems.append(f"{version:04d}_{name}: no .{missing}.sql")
    for version, names in names_by_version.items():
        if len(names) > 1:
            problems.append(f"version {version:04d} has several names: {', '.join(names)}")

    versions = sorted(names_by_version)
    expected = list(range(1, len(versions) + 1))
    if versions != expected:
        missing_versions = sorted(set(range(1, max(versions, default=0) + 1)) - set(versions))
        if 0 in versions:
            problems.append("versions start at 0001")
        if missing_versions:
            gaps = ", ".join(f"{v:04d}" for v in missing_versions)
            problems.append(f"versions are not contiguous: missing {gaps}")

    if problems:
        raise MigrationError("bad migration files: " + "; ".join(problems))
    return [MigrationName(version=v, name=names[0]) for v, names in names_by_version.items()]


def discover_migrations(directory: Path | None = None) -> list[Migration]:
    """Reads every migration of ``directory`` (default: the repository's ``migrations/``)."""
    folder = directory or DEFAULT_MIGRATIONS_DIR
    if not folder.is_dir():
        raise MigrationError(f"migrations folder not found: {folder}")
    migrations = []
    for entry in parse_migration_names(p.name for p in folder.iterdir() if p.is_file()):
        stem = f"{entry.version:04d}_{entry.name}"
        migrations.append(
            Migration(
                version=entry.version,
                name=entry.name,
                up_sql=(folder / f"{stem}.up.sql").read_text(encoding="utf-8"),
                down_sql=(folder / f"{stem}.down.sql").read_text(encoding="utf-8"),
            )
        )
    return migrations


async def migrate_up(
    conn_or_dsn: asyncpg.Connection | str,
    target: int | None = None,
    *,
    directory: Path | None = None,
) -> list[Migration]:
    """Applies every migration up to ``target`` (default: the newest); returns those applied.

    A ``target`` below the current version is an error (use :func:`migrate_down`).
    """
    migrations = discover_migrations(directory)
    target = _check_target(target, migrations)
    async with _locked(conn_or_dsn) as conn:
        applied = await _applied(conn, migrations)
        current = max(applied, default=0)
        if target < current:
            raise MigrationError(
                f"the database is at version {current}; migrate down to reach {target}"
            )
        done = []
        for migration in migrations:
            if migration.version in applied or migration.version > target:
                continue
            async with conn.transaction():
                await _execute(conn, migration, migration.up_sql, "up")
                await conn.execute(
                    "INSERT INTO kb.schema_migrations (version, name) VALUES ($1, $2)",
                    migration.version,
                    migration.name,
                )
            done.append(migration)
        return done


async def migrate_down(
    conn_or_dsn: asyncpg.Connection | str,
    target: int = 0,
    *,
    directory: Path | None = None,
) -> list[Migration]:
    """Reverts every applied migration above ``target`` (default: all), newest first."""
    migrations = discover_migrations(directory)
    target = _check_target(target, migrations)
    async with _locked(conn_or_dsn) as conn:
        applied = await _applied(conn, migrations)
        done = []
        for migration in reversed(migrations):
            if migration.version not in applied or migration.version <= target:
                continue
            async with conn.transaction():
                await _execute(conn, migration, migration.down_sql, "down")
                await conn.execute(
                    "DELETE FROM kb.schema_migrations WHERE version = $1", migration.version
                )
            done.append(migration)
        return done


async def migration_status(
    conn_or_dsn: asyncpg.Connection | str, *, directory: Path | None = None
) -> list[tuple[Migration, datetime | None]]:
    """Every migration with the time it was applied, or ``None`` if it is pending."""
    migrations = discover_migrations(directory)
    async with _locked(conn_or_dsn) as conn:
        applied = await _applied(conn, migrations)
    return [(m, applied.get(m.version)) for m in migrations]


def _check_target(target: int | None, migrations: list[Migration]) -> int:
    newest = len(migrations)
    if target is None:
        return newest
    if not 0 <= target <= newest:
        raise MigrationError(f"target version {target} is not between 0 and {newest}")
    return target


@asynccontextmanager
async def _locked(conn_or_dsn: asyncpg.Connection | str) -> AsyncIterator[asyncpg.Connection]:
    """A connection holding the migration lock, with ``kb.schema_migrations`` in place."""
    if isinstance(conn_or_dsn, str):
        conn = await db.connect(conn_or_dsn)
        owned = True
    else:
        conn, owned = conn_or_dsn, False
    try:
        await conn.execute("SELECT pg_advisory_lock($1)", ADVISORY_LOCK_KEY)
        try:
            # Under the lock: two first-time runs must not both create the table.
            await conn.execute(_BOOTSTRAP)
            yield conn
        finally:
            # A broken connection has lost the lock with its session already.
            with suppress(asyncpg.InterfaceError, OSError):
                await conn.execute("SELECT pg_advisory_unlock($1)", ADVISORY_LOCK_KEY)
    finally:
        if owned:
            await conn.close()


async def _applied(conn: asyncpg.Connection, migrations: list[Migration]) -> dict[int, datetime]:
    """Applied versions and when; refuses a database that does not match the files."""
    rows = await conn.fetch("SELECT version, name, applied_at FROM kb.schema_migrations")
    by_version = {m.version: m for m in migrations}
    unknown = [row for row in rows if row["version"] not in by_version]
    if unknown:
        newest = max(unknown, key=lambda row: row["version"])
        raise MigrationError(
            f"the database has migration {newest['version']:04d}_{newest['name']}, which is "
            f"not among the files (newest {len(migrations):04d}): is this code too old?"
        )
    for row in rows:
        known = by_version[row["version"]]
        if known.name != row["name"]:
            raise MigrationError(
                f"the database has {row['version']:04d}_{row['name']} where the files "
                f"have {known.label}"
            )
    return {row["version"]: row["applied_at"] for row in rows}


async def _execute(conn: asyncpg.Connection, migration: Migration, sql: str, side: str) -> None:
    try:
        await conn.execute(sql)
    except asyncpg.PostgresError as exc:
        raise MigrationError(f"{migration.label}.{side}.sql failed: {exc}") from exc
