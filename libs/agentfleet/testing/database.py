"""pytest fixtures for a real PostgreSQL: one server per session, one fresh database per test.

The server is ``AGENTFLEET_TEST_DATABASE_URL`` when set (any database on it that may create
databases), else an embedded PostgreSQL in a temporary folder, deleted at the end. Once per
session a template database is migrated; each test gets its own ``CREATE DATABASE ...
TEMPLATE`` clone (tens of milliseconds), dropped after the test, so tests never see each
other's rows. Every database a session creates carries a unique prefix and is dropped at the
end, also on a shared server.

Fixtures:

- ``admin_database_url`` (session): the server-level URL, for tests that create databases.
- ``database_factory`` (session): :class:`DatabaseFactory`, to make more databases.
- ``database_url``: a migrated database of the test's own.
- ``db_pool``: an :func:`agentfleet.postgres.db.create_pool` pool on ``database_url``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import secrets
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import asyncpg
import pytest_asyncio

from agentfleet.postgres import db
from agentfleet.postgres.embedded_pg import EmbeddedPostgres
from agentfleet.postgres.migrate import migrate_up

TEST_DATABASE_URL_ENV = "AGENTFLEET_TEST_DATABASE_URL"


class DatabaseFactory:
    """Creates and drops this session's databases on one server, through one admin connection."""

    def __init__(self, admin_url: str, admin: asyncpg.Connection) -> None:
        self.admin_url = admin_url
        self._admin = admin
        # Unique per session, so sessions sharing a server (CI jobs) never collide.
        self.prefix = f"agentfleet_test_{os.getpid()}_{secrets.token_hex(3)}"
        self.template = f"{self.prefix}_template"
        self._numbers = itertools.count(1)
        # One admin connection serves every test; asyncpg runs one query at a time on it.
        self._lock = asyncio.Lock()
        self._template_ready = False

    def url(self, name: str) -> str:
        return db.replace_database(self.admin_url, name)

    async def create_database(self, *, migrated: bool = True) -> str:
        """A new database (a clone of the migrated template, or empty); returns its URL."""
        name = f"{self.prefix}_{next(self._numbers)}"
        async with self._lock:
            if migrated and not self._template_ready:
                await self._admin.execute(f'CREATE DATABASE "{self.template}"')
                await migrate_up(self.url(self.template))
                self._template_ready = True
            template = self.template if migrated else "template0"
            await self._admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        return self.url(name)

    @contextlib.asynccontextmanager
    async def filled_pool(
        self, fill: Callable[[asyncpg.Connection], Awaitable[None]], *, max_size: int = 2
    ) -> AsyncIterator[asyncpg.Pool]:
        """A pool on a new migrated database that ``fill`` wrote first; the database is
        dropped on exit. For a module that shares one large data set between its tests."""
        url = await self.create_database()
        pool = await db.create_pool(url, min_size=1, max_size=max_size)
        try:
            async with pool.acquire() as conn:
                await fill(conn)
            yield pool
        finally:
            await pool.close()
            await self.drop_database(url)

    async def drop_database(self, url: str) -> None:
        """Drops a database made here, disconnecting whoever is still on it."""
        name = url.split("?", 1)[0].rsplit("/", 1)[-1]
        if not name.startswith(self.prefix):
            raise ValueError(f"{name} was not created by this session")
        async with self._lock:
            await self._admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    async def drop_all(self) -> None:
        """Drops every database of this session (the template and leftovers)."""
        async with self._lock:
            names = await self._admin.fetch(
                "SELECT datname FROM pg_database WHERE starts_with(datname, $1)", self.prefix
            )
            for row in names:
                await self._admin.execute(
                    f'DROP DATABASE IF EXISTS "{row["datname"]}" WITH (FORCE)'
                )


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def admin_database_url() -> AsyncIterator[str]:
    """URL of a database on the session's server from which databases can be created."""
    shared = os.environ.get(TEST_DATABASE_URL_ENV)
    if shared:
        yield shared
        return
    folder = Path(tempfile.mkdtemp(prefix="agentfleet-test-pg-"))
    server = EmbeddedPostgres(folder / "pg", durable=False)
    try:
        yield await server.start(database=None)
    finally:
        # As root the cluster may live in a folder made for it outside ``folder``.
        server.remove()
        shutil.rmtree(folder, ignore_errors=True)


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def database_factory(admin_database_url: str) -> AsyncIterator[DatabaseFactory]:
    """The session's :class:`DatabaseFactory`; drops everything it made at the end."""
    admin = await db.connect(admin_database_url)
    factory = DatabaseFactory(admin_database_url, admin)
    try:
        yield factory
    finally:
        try:
            await factory.drop_all()
        finally:
            await admin.close()


@pytest_asyncio.fixture(loop_scope="session")
async def database_url(database_factory: DatabaseFactory) -> AsyncIterator[str]:
    """A fully migrated database for this test alone."""
    url = await database_factory.create_database()
    try:
        yield url
    finally:
        await database_factory.drop_database(url)


@pytest_asyncio.fixture(loop_scope="session")
async def db_pool(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    """A pool on the test's database (JSON codecs set, like the services' pools)."""
    pool = await db.create_pool(database_url, min_size=1, max_size=10)
    try:
        yield pool
    finally:
        try:
            # A test that leaked an acquired connection must not hang the suite.
            await asyncio.wait_for(pool.close(), timeout=10)
        except TimeoutError:
            pool.terminate()
