"""Repositories of ``kb.mcp_servers`` and ``kb.project_secrets``.

Every statement is scoped by ``project_id``. A change NOTIFYs :data:`CHANGES_CHANNEL` with
the project id as payload (at commit), so every toolpool replica drops that project's
cached sessions and tool lists (:meth:`McpClientPool.listen`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import asyncpg
import structlog

from agentfleet import db
from agentfleet.errors import FailedPrecondition, FieldViolation, InvalidArgument, NotFound
from agentfleet.mcp_config import SECRET_NAME
from agentfleet.pagination import clamp_page_size, decode_page_token, encode_page_token, page_of
from agentfleet.secrets_crypto import SealedSecret, SecretsKeyMissing, SecretsKeyring

from .interpolate import ProjectSecrets
from .models import McpServerConfig, SecretInfo
from .validation import validate_server

log = structlog.get_logger(__name__)

CHANGES_CHANNEL = "agentfleet_mcp_servers"
MAX_SECRET_CHARS = 16384

_SERVER_COLUMNS = """
    s.id::text AS id, s.project_id, s.name, s.transport, s.command, s.args, s.env, s.url,
    s.headers, s.tool_prefix, s.enabled, s.connect_timeout_s, s.call_timeout_s,
    s.product_id::text AS product_id, p.name AS product_name, s.created_at, s.updated_at
"""

_UPSERT_SERVER = f"""
WITH s AS (
    INSERT INTO kb.mcp_servers AS m (
        project_id, name, transport, command, args, env, url, headers, tool_prefix, enabled,
        connect_timeout_s, call_timeout_s, product_id)
    SELECT $1, $2, $3, $4, $5::text[], $6::jsonb, $7, $8::jsonb, $9, $10, $11, $12, $13::uuid
    WHERE $13::uuid IS NULL
       OR EXISTS (SELECT 1 FROM kb.products WHERE id = $13::uuid AND project_id = $1)
    ON CONFLICT (project_id, name) DO UPDATE SET
        transport = EXCLUDED.transport, command = EXCLUDED.command, args = EXCLUDED.args,
        env = EXCLUDED.env, url = EXCLUDED.url, headers = EXCLUDED.headers,
        tool_prefix = EXCLUDED.tool_prefix, enabled = EXCLUDED.enabled,
        connect_timeout_s = EXCLUDED.connect_timeout_s,
        call_timeout_s = EXCLUDED.call_timeout_s, product_id = EXCLUDED.product_id,
        updated_at = now()
    RETURNING m.*, (m.xmax = 0) AS created
)
SELECT {_SERVER_COLUMNS}, s.created
FROM s LEFT JOIN kb.products p ON p.id = s.product_id
"""


class McpServerStore:
    """The project's MCP server configurations (as configured: references unresolved)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def upsert(self, config: McpServerConfig) -> tuple[McpServerConfig, bool]:
        """Validates and stores ``config``, replacing the server of the same name.

        Returns the stored configuration and whether it was created. Invalid input is
        :class:`InvalidArgument` naming every bad field, with nothing stored; a
        ``product_id`` that is not a product of the project is :class:`NotFound`.
        """
        validate_server(config)
        async with db.transaction(self._pool) as conn:
            row = await conn.fetchrow(
                _UPSERT_SERVER,
                config.project_id,
                config.name,
                config.transport,
                config.command,
                list(config.args),
                config.env,
                config.url,
                config.headers,
                config.tool_prefix,
                config.enabled,
                config.connect_timeout_s,
                config.call_timeout_s,
                config.product_id,
            )
            if row is None:
                raise NotFound(f"product {config.product_id} not found in project")
            await db.notify(conn, CHANGES_CHANNEL, config.project_id)
        return _server(row), bool(row["created"])

    async def get(self, project_id: str, name: str) -> McpServerConfig:
        """The server ``name`` of the project; :class:`NotFound` if there is none."""
        row = await self._pool.fetchrow(
            f"""SELECT {_SERVER_COLUMNS}
                FROM kb.mcp_servers s LEFT JOIN kb.products p ON p.id = s.product_id
                WHERE s.project_id = $1 AND s.name = $2""",
            project_id,
            name,
        )
        if row is None:
            raise NotFound(f"MCP server {name!r} not found")
        return _server(row)

    async def list(
        self, project_id: str, *, page_size: int = 0, page_token: str = ""
    ) -> tuple[list[McpServerConfig], str]:
        """One page of the project's servers by name, and the next page token ('' at the end)."""
        size = clamp_page_size(page_size)
        filters = {"project_id": project_id, "list": "mcp_servers"}
        position = decode_page_token(page_token, filters, arity=1)
        after = position[0] if position else None
        rows = await self._pool.fetch(
            f"""SELECT {_SERVER_COLUMNS}
                FROM kb.mcp_servers s LEFT JOIN kb.products p ON p.id = s.product_id
                WHERE s.project_id = $1 AND ($2::text IS NULL OR s.name > $2)
                ORDER BY s.name LIMIT $3""",
            project_id,
            after,
            size + 1,
        )
        page, more = page_of(rows, size)
        servers = [_server(r) for r in page]
        token = encode_page_token([servers[-1].name], filters) if more else ""
        return servers, token

    async def list_all(
        self, project_id: str, *, enabled_only: bool = True
    ) -> list[McpServerConfig]:
        """Every server of the project by name (the catalog's view: enabled ones by default)."""
        rows = await self._pool.fetch(
            f"""SELECT {_SERVER_COLUMNS}
                FROM kb.mcp_servers s LEFT JOIN kb.products p ON p.id = s.product_id
                WHERE s.project_id = $1 AND (s.enabled OR NOT $2)
                ORDER BY s.name""",
            project_id,
            enabled_only,
        )
        return [_server(r) for r in rows]

    async def delete(self, project_id: str, name: str) -> None:
        """Deletes the server ``name``; :class:`NotFound` if there is none."""
        async with db.transaction(self._pool) as conn:
            deleted = await conn.fetchval(
                "DELETE FROM kb.mcp_servers WHERE project_id = $1 AND name = $2 RETURNING id",
                project_id,
                name,
            )
            if deleted is None:
                raise NotFound(f"MCP server {name!r} not found")
            await db.notify(conn, CHANGES_CHANNEL, project_id)


class SecretStore:
    """The project's secrets. Values go in and, through :meth:`resolve` only, to the pool.

    Values are stored sealed (:mod:`agentfleet.secrets_crypto`); without a keyring nothing
    can be set (:class:`SecretsKeyMissing`), and only rows written before encryption (plain,
    until ``agentfleet secrets rotate-key`` seals them) can be read.
    """

    def __init__(self, pool: asyncpg.Pool, keyring: SecretsKeyring | None = None) -> None:
        self._pool = pool
        self._keyring = keyring

    async def set(self, project_id: str, name: str, value: str) -> tuple[SecretInfo, bool]:
        """Creates or replaces secret ``name``; returns it (no value) and whether it was created."""
        violations = []
        if not project_id:
            violations.append(FieldViolation("project_id", "is required"))
        if not SECRET_NAME.match(name):
            violations.append(
                FieldViolation(
                    "name", "must be 1-128 letters, digits and '_', not starting with a digit"
                )
            )
        if not value:
            violations.append(FieldViolation("value", "is required"))
        elif len(value) > MAX_SECRET_CHARS or "\0" in value:
            violations.append(
                FieldViolation("value", f"must be at most {MAX_SECRET_CHARS} characters, no NUL")
            )
        if violations:
            raise InvalidArgument.for_fields(violations)
        if self._keyring is None:
            raise SecretsKeyMissing()
        sealed = self._keyring.seal(project_id, name, value)
        async with db.transaction(self._pool) as conn:
            row = await conn.fetchrow(
                """INSERT INTO kb.project_secrets AS s
                       (project_id, name, value, ciphertext, nonce, wrapped_key, key_id)
                   VALUES ($1, $2, NULL, $3, $4, $5, $6)
                   ON CONFLICT (project_id, name) DO UPDATE
                       SET value = NULL, ciphertext = EXCLUDED.ciphertext,
                           nonce = EXCLUDED.nonce, wrapped_key = EXCLUDED.wrapped_key,
                           key_id = EXCLUDED.key_id, updated_at = now()
                   RETURNING s.name, s.created_at, s.updated_at, (s.xmax = 0) AS created""",
                project_id,
                name,
                sealed.ciphertext,
                sealed.nonce,
                sealed.wrapped_key,
                sealed.key_id,
            )
            # Sessions opened with the old value must go: replicas reconnect with the new one.
            await db.notify(conn, CHANGES_CHANNEL, project_id)
        assert row is not None
        return _secret(row), bool(row["created"])

    async def list(
        self, project_id: str, *, page_size: int = 0, page_token: str = ""
    ) -> tuple[list[SecretInfo], str]:
        """One page of the project's secrets by name (never values), and the next page token."""
        size = clamp_page_size(page_size)
        filters = {"project_id": project_id, "list": "secrets"}
        position = decode_page_token(page_token, filters, arity=1)
        after = position[0] if position else None
        rows = await self._pool.fetch(
            """SELECT name, created_at, updated_at FROM kb.project_secrets
               WHERE project_id = $1 AND ($2::text IS NULL OR name > $2)
               ORDER BY name LIMIT $3""",
            project_id,
            after,
            size + 1,
        )
        page, more = page_of(rows, size)
        secrets = [_secret(r) for r in page]
        token = encode_page_token([secrets[-1].name], filters) if more else ""
        return secrets, token

    async def delete(self, project_id: str, name: str) -> None:
        """Deletes secret ``name``; :class:`NotFound` if there is none."""
        async with db.transaction(self._pool) as conn:
            deleted = await conn.fetchval(
                "DELETE FROM kb.project_secrets WHERE project_id = $1 AND name = $2 RETURNING id",
                project_id,
                name,
            )
            if deleted is None:
                raise NotFound(f"secret {name!r} not found")
            await db.notify(conn, CHANGES_CHANNEL, project_id)

    async def resolve(self, project_id: str) -> ProjectSecrets:
        """Every secret of the project with its value, for interpolation only.

        A secret that does not decrypt (its key is gone, the row was altered or copied from
        another project) is left out and named in ``undecryptable``, so a server using it
        fails with that reason and the others still work.

        Internal: the result must never be returned by an RPC, logged or put in a span.
        """
        rows = await self._pool.fetch(
            """SELECT name, value, ciphertext, nonce, wrapped_key, key_id
               FROM kb.project_secrets WHERE project_id = $1""",
            project_id,
        )
        values: dict[str, str] = {}
        undecryptable: dict[str, str] = {}
        for row in rows:
            if row["value"] is not None:
                values[row["name"]] = row["value"]  # written before encryption
                continue
            try:
                if self._keyring is None:
                    raise SecretsKeyMissing()
                values[row["name"]] = self._keyring.open(project_id, row["name"], _sealed(row))
            except FailedPrecondition as exc:
                undecryptable[row["name"]] = exc.message
                log.warning("secret_undecryptable", project_id=project_id, reason=exc.message)
        return ProjectSecrets(values, undecryptable=undecryptable)


def _server(row: Mapping[str, Any]) -> McpServerConfig:
    return McpServerConfig(
        id=row["id"],
        project_id=row["project_id"],
        name=row["name"],
        transport=row["transport"],
        command=row["command"],
        args=tuple(row["args"]),
        env=dict(row["env"]),
        url=row["url"],
        headers=dict(row["headers"]),
        tool_prefix=row["tool_prefix"],
        enabled=row["enabled"],
        connect_timeout_s=row["connect_timeout_s"],
        call_timeout_s=row["call_timeout_s"],
        product_id=row["product_id"],
        product_name=row["product_name"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def _sealed(row: Mapping[str, Any]) -> SealedSecret:
    return SealedSecret(
        ciphertext=row["ciphertext"],
        nonce=row["nonce"],
        wrapped_key=row["wrapped_key"],
        key_id=row["key_id"],
    )


def _secret(row: Mapping[str, Any]) -> SecretInfo:
    return SecretInfo(name=row["name"], created_at=row["created_at"], updated_at=row["updated_at"])
