"""A fresh database per peer round on the runner's PostgreSQL (asyncpg, either venv)."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import urlsplit, urlunsplit

import asyncpg


@asynccontextmanager
async def fresh_database(server_url: str, prefix: str) -> AsyncIterator[str]:
    """A new database on ``server_url``'s server, dropped afterwards; yields its URL."""
    name = f"{prefix}_{secrets.token_hex(4)}"
    admin = await asyncpg.connect(server_url)
    await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        parts = urlsplit(server_url)
        yield urlunsplit(parts._replace(path=f"/{name}"))
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


def with_driver(url: str, driver: str) -> str:
    """``postgresql://...`` -> ``postgresql+<driver>://...`` (SQLAlchemy's form)."""
    scheme, rest = url.split("://", 1)
    return f"postgresql+{driver}://{rest}" if scheme in ("postgres", "postgresql") else url
