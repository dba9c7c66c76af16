"""``agentfleet migrate`` and ``agentfleet token``: administration straight on the database."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.table import Table
from rich.text import Text

from agentfleet.auth import TokenStore
from agentfleet.cli.render import console, notes
from agentfleet.config import Settings
from agentfleet.errors import FailedPrecondition, NotFound
from agentfleet.postgres import db, migrate
from agentfleet.postgres.db import create_pool
from agentfleet.postgres.embedded_pg import EmbeddedPostgres, resolve_database_url

# Notes go to stderr so `TOKEN=$(agentfleet token create ...)` captures the token alone.


async def run_migrate(settings: Settings, action: str, target: int | None) -> int:
    database_url, embedded = await resolve_database_url(settings)
    try:
        return await _migrate(database_url, action, target, settings.migrations_dir)
    finally:
        if embedded is not None:
            embedded.stop()


async def _migrate(
    database_url: str, action: str, target: int | None, directory: Path | None
) -> int:
    if action == "up":
        applied = await migrate.migrate_up(database_url, target=target, directory=directory)
        for m in applied:
            console.print(f"applied   {m.version:04d} {m.name}")
        console.print(f"schema is at version {await _current_version(database_url, directory)}")
    elif action == "down":
        reverted = await migrate.migrate_down(database_url, target=target or 0, directory=directory)
        for m in reverted:
            console.print(f"reverted  {m.version:04d} {m.name}")
        console.print(f"schema is at version {await _current_version(database_url, directory)}")
    else:
        table = Table("version", "name", "applied at")
        for m, applied_at in await migrate.migration_status(database_url, directory=directory):
            table.add_row(f"{m.version:04d}", m.name, str(applied_at) if applied_at else "pending")
        console.print(table)
    return 0


async def _current_version(database_url: str, directory: Path | None) -> int:
    status = await migrate.migration_status(database_url, directory=directory)
    return max((m.version for m, applied_at in status if applied_at is not None), default=0)


async def run_token(settings: Settings, args: argparse.Namespace) -> int:
    database_url, embedded = await resolve_database_url(settings)
    try:
        await _require_schema(database_url, settings, embedded)
        return await _token(database_url, args)
    finally:
        if embedded is not None:
            embedded.stop()


async def _require_schema(
    database_url: str, settings: Settings, embedded: EmbeddedPostgres | None
) -> None:
    """FAILED_PRECONDITION naming the database and what to do, when its schema is missing
    or behind (say, a command run from another folder found a fresh embedded database)."""
    newest = max(
        (m.version for m in migrate.discover_migrations(settings.migrations_dir)), default=0
    )
    conn = await db.connect(database_url)
    try:
        version = 0
        if await conn.fetchval("SELECT to_regclass('kb.schema_migrations') IS NOT NULL"):
            version = await conn.fetchval(
                "SELECT coalesce(max(version), 0) FROM kb.schema_migrations"
            )
    finally:
        await conn.close()
    if version >= newest:
        return
    where = (
        f"the embedded PostgreSQL in {embedded.data_dir} (AGENTFLEET_DATA_DIR={settings.data_dir})"
        if embedded is not None
        else f"DATABASE_URL {db.redact(database_url)}"
    )
    raise FailedPrecondition(
        f"{where} is at schema version {version}, not {newest}: run `agentfleet migrate` "
        "there, or point AGENTFLEET_DATA_DIR (or DATABASE_URL) at the database of your stack"
    )


async def _token(database_url: str, args: argparse.Namespace) -> int:
    pool = await create_pool(database_url, min_size=1, max_size=2)
    try:
        store = TokenStore(pool)
        if args.token_command == "create":
            created = await store.create(
                project_id=args.project, role=args.role, name=args.name, service=args.service
            )
            scope = f"project {created.project_id}" if created.project_id else "all projects"
            if created.service:
                scope = f"the {created.service} service's methods, {scope}"
            notes.print(
                Text(
                    f"token {created.token_id} ({created.role}, {scope}); it is shown only once:",
                    style="dim",
                )
            )
            print(created.token)
            return 0
        if await store.revoke(args.token_id):
            console.print(f"revoked {args.token_id}")
            return 0
        raise NotFound(f"no active token {args.token_id} (unknown or already revoked)")
    finally:
        await pool.close()
