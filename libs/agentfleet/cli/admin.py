"""``agentfleet migrate`` and ``agentfleet token``: administration straight on the database."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.table import Table

from agentfleet import migrate
from agentfleet.auth import TokenStore
from agentfleet.config import Settings
from agentfleet.db import create_pool
from agentfleet.embedded_pg import resolve_database_url

console = Console()
# Notes go to stderr so `TOKEN=$(agentfleet token create ...)` captures the token alone.
notes = Console(stderr=True)


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
        return await _token(database_url, args)
    finally:
        if embedded is not None:
            embedded.stop()


async def _token(database_url: str, args: argparse.Namespace) -> int:
    pool = await create_pool(database_url, min_size=1, max_size=2)
    try:
        store = TokenStore(pool)
        if args.token_command == "create":
            created = await store.create(project_id=args.project, role=args.role, name=args.name)
            scope = f"project {created.project_id}" if created.project_id else "all projects"
            notes.print(
                f"[dim]token {created.token_id} ({created.role}, {scope}); "
                "it is shown only once:[/dim]",
                highlight=False,
            )
            print(created.token)
            return 0
        if await store.revoke(args.token_id):
            console.print(f"revoked {args.token_id}")
            return 0
        console.print(f"no active token {args.token_id}")
        return 1
    finally:
        await pool.close()
