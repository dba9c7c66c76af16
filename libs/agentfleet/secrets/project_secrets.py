"""The secrets of a project (table ``kb.project_secrets``): the stored row and its repository.

Two writers: the toolpool (``SetSecret``, ``DeleteSecret``, and reading values to fill MCP
server configurations) and ``agentfleet secrets rotate-key`` (moving rows onto the current
key). Both go through :class:`ProjectSecretRepository`, so a row is read and written one way;
sealing and opening values is :mod:`agentfleet.secrets.secrets_crypto`, done by each caller.

Values leave this module only as :class:`StoredSecret` (sealed, or plain for a row written
before encryption); listings carry names and times, never values. The toolpool's writes
NOTIFY :data:`agentfleet.mcp.servers.CHANGES_CHANNEL` with the project id in the write's
transaction, so every replica reconnects the sessions opened with the old value; a rotation
changes no value, so it notifies nobody.

Every statement of a project's secrets is scoped by ``project_id``. The rotation's batch
and count span every project: that command administers the whole table.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass

import asyncpg

from agentfleet.errors import NotFound, ResourceExhausted
from agentfleet.mcp.servers import CHANGES_CHANNEL
from agentfleet.postgres import db
from agentfleet.postgres.project_rows import Rows, delete_named, project_name_page
from agentfleet.postgres.rows import from_row
from agentfleet.secrets.secrets_crypto import SealedSecret

__all__ = ["MAX_SECRETS_SETTING", "ProjectSecretRepository", "StoredSecret"]

MAX_SECRETS_SETTING = "AGENTFLEET_MAX_SECRETS_PER_PROJECT"


@dataclass(frozen=True, kw_only=True, slots=True)
class StoredSecret:
    """A row with its value as stored: ``sealed``, or ``value`` in plain for a row written
    before encryption (until ``rotate-key`` seals it)."""

    id: str
    project_id: str
    name: str
    value: str | None
    sealed: SealedSecret | None


_STORED = "id::text AS id, project_id, name, value, ciphertext, nonce, wrapped_key, key_id"

_UPSERT = """
INSERT INTO kb.project_secrets AS s
    (project_id, name, value, ciphertext, nonce, wrapped_key, key_id)
VALUES ($1, $2, NULL, $3, $4, $5, $6)
ON CONFLICT (project_id, name) DO UPDATE
    SET value = NULL, ciphertext = EXCLUDED.ciphertext,
        nonce = EXCLUDED.nonce, wrapped_key = EXCLUDED.wrapped_key,
        key_id = EXCLUDED.key_id, updated_at = now()
RETURNING s.name, s.created_at, s.updated_at, (s.xmax = 0) AS created
"""

# Rows that need work: plain (written before encryption) or wrapped by another key.
_TO_ROTATE = f"""
SELECT {_STORED}
FROM kb.project_secrets
WHERE (value IS NOT NULL OR key_id <> $1) AND ($2::uuid IS NULL OR id > $2::uuid)
ORDER BY id
LIMIT $3
FOR UPDATE
"""

_STORE_SEALED = """
UPDATE kb.project_secrets
SET value = NULL, ciphertext = $3, nonce = $4, wrapped_key = $5, key_id = $6
WHERE project_id = $1 AND id = $2::uuid
"""


def _stored(row: asyncpg.Record) -> StoredSecret:
    sealed = None if row["value"] is not None else from_row(SealedSecret, row)
    return from_row(StoredSecret, row, sealed=sealed)


class ProjectSecretRepository:
    """Reads and writes ``kb.project_secrets`` on a pool; the rotation's methods run on the
    caller's connection, inside its transaction."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def upsert(
        self, project_id: str, name: str, sealed: SealedSecret, *, max_secrets: int | None = None
    ) -> tuple[asyncpg.Record, bool]:
        """Stores the sealed value of secret ``name``, replacing the project's secret of that
        name. Returns its ``name, created_at, updated_at`` and whether it was created.

        ``max_secrets``: refuse (:class:`ResourceExhausted`, nothing written) a new name when
        the project already holds that many; replacing a value is always allowed."""
        async with db.transaction(self._pool) as conn:
            if max_secrets is not None:
                await _check_room(conn, project_id, name, max_secrets)
            row = await conn.fetchrow(
                _UPSERT,
                project_id,
                name,
                sealed.ciphertext,
                sealed.nonce,
                sealed.wrapped_key,
                sealed.key_id,
            )
            await db.notify(conn, CHANGES_CHANNEL, project_id)
        assert row is not None  # an upsert always returns its row
        return row, bool(row["created"])

    async def list_names(
        self, project_id: str, *, page_size: int = 0, page_token: str = ""
    ) -> tuple[Rows, str]:
        """One page of ``name, created_at, updated_at`` by name, and the next page token."""
        return await project_name_page(
            self._pool,
            "SELECT s.name, s.created_at, s.updated_at FROM kb.project_secrets s",
            alias="s",
            project_id=project_id,
            page_size=page_size,
            page_token=page_token,
            listing="secrets",
        )

    async def delete(self, project_id: str, name: str) -> None:
        """Deletes secret ``name``; :class:`NotFound` if there is none."""
        async with db.transaction(self._pool) as conn:
            if not await delete_named(conn, "kb.project_secrets", project_id, name):
                raise NotFound(f"secret {name!r} not found")
            await db.notify(conn, CHANGES_CHANNEL, project_id)

    async def stored(self, project_id: str) -> builtins.list[StoredSecret]:
        """Every secret of the project as stored (the values, for interpolation only)."""
        rows = await self._pool.fetch(
            f"SELECT {_STORED} FROM kb.project_secrets WHERE project_id = $1", project_id
        )
        return [_stored(row) for row in rows]

    async def count_on_key(self, key_id: str) -> int:
        """How many rows of every project are sealed under ``key_id``."""
        count = await self._pool.fetchval(
            "SELECT count(*) FROM kb.project_secrets WHERE value IS NULL AND key_id = $1",
            key_id,
        )
        return int(count)

    @staticmethod
    async def lock_to_rotate(
        conn: asyncpg.Connection, key_id: str, after: str | None, limit: int
    ) -> builtins.list[StoredSecret]:
        """Up to ``limit`` rows of any project after id ``after`` that are plain or sealed
        under another key than ``key_id``, locked until the transaction ends."""
        return [_stored(row) for row in await conn.fetch(_TO_ROTATE, key_id, after, limit)]

    @staticmethod
    async def store_sealed(
        conn: asyncpg.Connection, secret: StoredSecret, sealed: SealedSecret
    ) -> None:
        """Replaces the stored value of ``secret`` by ``sealed``."""
        await conn.execute(
            _STORE_SEALED,
            secret.project_id,
            secret.id,
            sealed.ciphertext,
            sealed.nonce,
            sealed.wrapped_key,
            sealed.key_id,
        )


async def _check_room(
    conn: asyncpg.Connection, project_id: str, name: str, max_secrets: int
) -> None:
    # Serialises the count and the insert per project, so concurrent SetSecrets of new
    # names never pass the cap: the insert's snapshot is taken after the lock.
    await db.lock_key(conn, f"agentfleet.project-secrets:{project_id}")
    held, replacing = await conn.fetchrow(
        "SELECT count(*), coalesce(bool_or(name = $2), false)"
        " FROM kb.project_secrets WHERE project_id = $1",
        project_id,
        name,
    )
    if not replacing and held >= max_secrets:
        raise ResourceExhausted(
            f"project {project_id!r} already has {held} secrets, the limit set by "
            f"{MAX_SECRETS_SETTING} ({max_secrets}); delete one or replace an existing one"
        )
