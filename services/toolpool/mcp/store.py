"""The toolpool's stores of a project's MCP servers and secrets.

The rows are read and written by :class:`agentfleet.mcp.servers.McpServerRepository` (shared
with the executor's product installs) and :class:`agentfleet.secrets.project_secrets.
ProjectSecretRepository` (shared with ``agentfleet secrets rotate-key``); these stores
validate what they are given first, and seal and open secret values. A change NOTIFYs
:data:`CHANGES_CHANNEL` with the project id as payload (at commit), so every toolpool
replica drops that project's cached sessions and tool lists (:meth:`McpClientPool.listen`).
"""

from __future__ import annotations

import builtins

import asyncpg
import structlog

from agentfleet.errors import FieldViolation, InvalidArgument
from agentfleet.mcp.config import SECRET_NAME
from agentfleet.mcp.servers import CHANGES_CHANNEL, McpServerRepository
from agentfleet.postgres.rows import from_row
from agentfleet.secrets.project_secrets import ProjectSecretRepository
from agentfleet.secrets.secrets_crypto import SecretsKeyMissing, SecretsKeyring
from agentfleet.secrets.values import ProjectSecrets, resolve_secrets

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

    Values are stored sealed (:mod:`agentfleet.secrets.secrets_crypto`); without a keyring nothing
    can be set (:class:`SecretsKeyMissing`), and only rows written before encryption (plain,
    until ``agentfleet secrets rotate-key`` seals them) can be read.
    """

    def __init__(
        self,
        pool: asyncpg.Pool,
        keyring: SecretsKeyring | None = None,
        *,
        max_secrets_per_project: int | None = None,
    ) -> None:
        self._pool = pool
        self._rows = ProjectSecretRepository(pool)
        self._keyring = keyring
        # Every connection and tool call of the project reads and redacts all its values:
        # a bounded count bounds that work (docs/SECURITY.md, Redaction).
        self._max_secrets = max_secrets_per_project

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
        row, created = await self._rows.upsert(
            project_id, name, sealed, max_secrets=self._max_secrets
        )
        return from_row(SecretInfo, row), created

    async def list(
        self, project_id: str, *, page_size: int = 0, page_token: str = ""
    ) -> tuple[builtins.list[SecretInfo], str]:
        """One page of the project's secrets by name (never values), and the next page token."""
        page, token = await self._rows.list_names(
            project_id, page_size=page_size, page_token=page_token
        )
        return [from_row(SecretInfo, r) for r in page], token

    async def delete(self, project_id: str, name: str) -> None:
        """Deletes secret ``name``; :class:`NotFound` if there is none."""
        await self._rows.delete(project_id, name)

    async def resolve(self, project_id: str) -> ProjectSecrets:
        """Every secret of the project with its value, for interpolation only
        (:func:`agentfleet.secrets.values.resolve_secrets`)."""
        return await resolve_secrets(self._pool, self._keyring, project_id)
