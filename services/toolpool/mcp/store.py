"""The toolpool's repositories of ``kb.mcp_servers`` and ``kb.project_secrets``.

Every statement is scoped by ``project_id``. A change NOTIFYs :data:`CHANGES_CHANNEL` with
the project id as payload (at commit), so every toolpool replica drops that project's
cached sessions and tool lists (:meth:`McpClientPool.listen`). The server rows are read and
written by :class:`agentfleet.mcp_servers.McpServerRepository`, shared with the executor's
product installs; the toolpool's store validates what it is given first.
"""

from __future__ import annotations

import builtins

import asyncpg
import structlog

from agentfleet import db
from agentfleet.errors import FailedPrecondition, FieldViolation, InvalidArgument, NotFound
from agentfleet.mcp_config import SECRET_NAME
from agentfleet.mcp_servers import CHANGES_CHANNEL, McpServerRepository
from agentfleet.project_rows import delete_named, name_page
from agentfleet.rows import from_row
from agentfleet.secrets_crypto import SealedSecret, SecretsKeyMissing, SecretsKeyring

from .interpolate import ProjectSecrets
from .models import SecretInfo
from .validation import validate_server

__all__ = ["CHANGES_CHANNEL", "McpServerStore", "SecretStore"]

log = structlog.get_logger(__name__)

MAX_SECRET_CHARS = 16384


class McpServerStore(McpServerRepository):
    """The project's MCP server configurations as the toolpool's RPCs write them: every
    configuration is validated (:func:`validate_server`) before it is stored, and invalid
    input is :class:`InvalidArgument` naming every bad field, with nothing stored."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        super().__init__(pool, validate=validate_server)


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
        return from_row(SecretInfo, row), bool(row["created"])

    async def list(
        self, project_id: str, *, page_size: int = 0, page_token: str = ""
    ) -> tuple[builtins.list[SecretInfo], str]:
        """One page of the project's secrets by name (never values), and the next page token."""
        page, token = await name_page(
            lambda after, limit: self._pool.fetch(
                """SELECT name, created_at, updated_at FROM kb.project_secrets
                   WHERE project_id = $1 AND ($2::text IS NULL OR name > $2)
                   ORDER BY name LIMIT $3""",
                project_id,
                after,
                limit,
            ),
            page_size=page_size,
            page_token=page_token,
            filters={"project_id": project_id, "list": "secrets"},
        )
        return [from_row(SecretInfo, r) for r in page], token

    async def delete(self, project_id: str, name: str) -> None:
        """Deletes secret ``name``; :class:`NotFound` if there is none."""
        async with db.transaction(self._pool) as conn:
            if not await delete_named(conn, "kb.project_secrets", project_id, name):
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
                values[row["name"]] = self._keyring.open(
                    project_id, row["name"], from_row(SealedSecret, row)
                )
            except FailedPrecondition as exc:
                undecryptable[row["name"]] = exc.message
                log.warning("secret_undecryptable", project_id=project_id, reason=exc.message)
        return ProjectSecrets(values, undecryptable=undecryptable)
