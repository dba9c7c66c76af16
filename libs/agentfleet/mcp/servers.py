"""The MCP servers of a project (table ``kb.mcp_servers``): the row type and its repository.

Two services write the table: the toolpool (``UpsertMcpServer``, ``DeleteMcpServer``) and
the executor (``InstallProduct`` / ``UninstallProduct``, on the connection of the install's
transaction). Both go through :class:`McpServerRepository`, so a row is read and written one
way whoever touches it; what makes a configuration valid is :mod:`agentfleet.mcp.config`,
checked by each caller before it writes.

Every statement is scoped by ``project_id``. Every write NOTIFYs :data:`CHANGES_CHANNEL` with
the project id as payload in the transaction of the write (delivered at commit, once per
transaction), so every toolpool replica drops that project's cached sessions and tool lists.
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import asyncpg

from agentfleet.errors import AlreadyExists, NotFound
from agentfleet.postgres import db
from agentfleet.postgres.project_rows import delete_named, delete_product_rows, project_name_page
from agentfleet.postgres.rows import from_row

__all__ = [
    "CHANGES_CHANNEL",
    "DEFAULT_CALL_TIMEOUT_S",
    "DEFAULT_CONNECT_TIMEOUT_S",
    "McpServerConfig",
    "McpServerRepository",
    "Transport",
]

CHANGES_CHANNEL = "agentfleet_mcp_servers"
"""NOTIFY channel whose payload is a project id whose MCP servers (or secrets) changed."""

Transport = Literal["stdio", "sse", "streamable_http"]

DEFAULT_CONNECT_TIMEOUT_S = 10.0
DEFAULT_CALL_TIMEOUT_S = 60.0


@dataclass(frozen=True, kw_only=True, slots=True)
class McpServerConfig:
    """One external MCP server of a project (a row of ``kb.mcp_servers``, or a server a
    product manifest brings, whose ``project_id`` is '' until it is installed).

    ``args``, ``env``, ``url`` and ``headers`` keep their ``${NAME}`` references as
    configured; the toolpool fills them from the project's secrets at connect time.
    """

    project_id: str
    name: str
    """Unique within the project: ``^[a-z0-9_-]{1,63}$``."""
    transport: Transport
    command: str | None = None
    """stdio: the executable to start."""
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    """stdio: set for the child on top of the SDK's minimal environment (PATH, HOME, ...)."""
    url: str | None = None
    """sse / streamable_http: the endpoint."""
    headers: dict[str, str] = field(default_factory=dict)
    tool_prefix: str | None = None
    """None: tools are exposed as ``<name>__<tool>``; ``""`` exposes raw tool names."""
    enabled: bool = True
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S
    call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S
    """Default limit of one tool call; a call may ask for another."""
    product_id: str | None = None
    """Product that installed the server (its rows go with it); None when made by hand."""
    # Output only: set by the repository.
    id: str | None = None
    product_name: str | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None

    @property
    def exposed_prefix(self) -> str:
        """What the catalog puts before each tool name of this server."""
        return f"{self.name}__" if self.tool_prefix is None else self.tool_prefix

    def exposed_name(self, tool_name: str) -> str:
        """The catalog name of this server's tool ``tool_name``."""
        return self.exposed_prefix + tool_name

    def configures_as(self, other: McpServerConfig) -> bool:
        """Whether ``other`` is the same configuration, whatever the repository set on either
        (id, product name, timestamps): an install leaves such a server untouched."""
        return dataclasses.replace(self, **_OUTPUT_ONLY) == dataclasses.replace(
            other, **_OUTPUT_ONLY
        )


_OUTPUT_ONLY: dict[str, Any] = {
    "id": None,
    "product_name": None,
    "created_at": None,
    "updated_at": None,
}

_WRITTEN = (
    "project_id",
    "name",
    "transport",
    "command",
    "args",
    "env",
    "url",
    "headers",
    "tool_prefix",
    "enabled",
    "connect_timeout_s",
    "call_timeout_s",
    "product_id",
)
"""The fields an upsert writes, in the order of its parameters ``$1 .. $13``."""

_COLUMNS = """
    s.id::text AS id, s.project_id, s.name, s.transport, s.command, s.args, s.env, s.url,
    s.headers, s.tool_prefix, s.enabled, s.connect_timeout_s, s.call_timeout_s,
    s.product_id::text AS product_id, p.name AS product_name, s.created_at, s.updated_at
"""
_FROM = "kb.mcp_servers s LEFT JOIN kb.products p ON p.id = s.product_id"

_UPSERT = f"""
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
    -- $14 false (a product install): only a server of the same product is replaced.
    WHERE $14::boolean OR m.product_id = EXCLUDED.product_id
    RETURNING m.*, (m.xmax = 0) AS created
)
SELECT {_COLUMNS}, s.created
FROM s LEFT JOIN kb.products p ON p.id = s.product_id
"""


def _server(row: asyncpg.Record) -> McpServerConfig:
    return from_row(
        McpServerConfig,
        row,
        args=tuple(row["args"]),
        env=dict(row["env"]),
        headers=dict(row["headers"]),
    )


class McpServerRepository:
    """Reads and writes ``kb.mcp_servers`` (configurations as stored: references unresolved).

    Methods that take ``conn`` run on it, inside the caller's transaction (a product
    install); without it they use the pool, each write in its own transaction.
    """

    def __init__(
        self,
        pool: asyncpg.Pool,
        *,
        validate: Callable[[McpServerConfig], None] | None = None,
    ) -> None:
        self._pool = pool
        self._validate = validate
        """Raises for a configuration :meth:`upsert` must not store (the toolpool's checks);
        None when the caller validated already (a product install, by its manifest)."""

    async def upsert(
        self,
        config: McpServerConfig,
        *,
        take_over: bool = True,
        conn: asyncpg.Connection | None = None,
    ) -> tuple[McpServerConfig, bool]:
        """Stores ``config`` (checked by ``validate`` first, if set), replacing the project's
        server of its name.

        Returns the stored configuration and whether it was created. A ``product_id`` that
        is not a product of the project is :class:`NotFound`. With ``take_over`` False the
        server of that name may only be replaced when it belongs to ``config.product_id``:
        :class:`AlreadyExists` when it belongs to no product or another one (the installer
        checks before; this closes the race with a concurrent write).
        """
        if self._validate is not None:
            self._validate(config)
        async with self._writing(conn) as tx:
            row = await tx.fetchrow(
                _UPSERT, *(_parameter(config, column) for column in _WRITTEN), take_over
            )
            if row is None and not take_over:
                raise AlreadyExists(
                    f"MCP server {config.name!r} already exists in project "
                    f"{config.project_id!r} and belongs to no product or another one"
                )
            if row is None:
                raise NotFound(f"product {config.product_id} not found in project")
            await db.notify(tx, CHANGES_CHANNEL, config.project_id)
        return _server(row), bool(row["created"])

    async def get(self, project_id: str, name: str) -> McpServerConfig:
        """The server ``name`` of the project; :class:`NotFound` if there is none."""
        row = await self._pool.fetchrow(
            f"SELECT {_COLUMNS} FROM {_FROM} WHERE s.project_id = $1 AND s.name = $2",
            project_id,
            name,
        )
        if row is None:
            raise NotFound(f"MCP server {name!r} not found")
        return _server(row)

    async def list(
        self, project_id: str, *, page_size: int = 0, page_token: str = ""
    ) -> tuple[builtins.list[McpServerConfig], str]:
        """One page of the project's servers by name, and the next page token ('' at the end)."""
        page, token = await project_name_page(
            self._pool,
            f"SELECT {_COLUMNS} FROM {_FROM}",
            alias="s",
            project_id=project_id,
            page_size=page_size,
            page_token=page_token,
            listing="mcp_servers",
        )
        return [_server(r) for r in page], token

    async def list_all(
        self,
        project_id: str,
        *,
        enabled_only: bool = True,
        conn: asyncpg.Connection | None = None,
    ) -> builtins.list[McpServerConfig]:
        """Every server of the project by name (the catalog's view: enabled ones by default)."""
        rows = await (conn if conn is not None else self._pool).fetch(
            f"""SELECT {_COLUMNS} FROM {_FROM}
                WHERE s.project_id = $1 AND (s.enabled OR NOT $2)
                ORDER BY s.name""",
            project_id,
            enabled_only,
        )
        return [_server(r) for r in rows]

    async def delete(self, project_id: str, name: str) -> None:
        """Deletes the server ``name``; :class:`NotFound` if there is none."""
        async with self._writing(None) as tx:
            if not await delete_named(tx, "kb.mcp_servers", project_id, name):
                raise NotFound(f"MCP server {name!r} not found")
            await db.notify(tx, CHANGES_CHANNEL, project_id)

    async def remove_unlisted(
        self,
        conn: asyncpg.Connection,
        project_id: str,
        product_id: uuid.UUID | str,
        keep: Sequence[str],
    ) -> builtins.list[str]:
        """Deletes the product's servers ``keep`` does not name, on the caller's connection;
        their names (``keep`` empty: all of them, as when the product is uninstalled)."""
        removed = await delete_product_rows(conn, "kb.mcp_servers", project_id, product_id, keep)
        if removed:
            await db.notify(conn, CHANGES_CHANNEL, project_id)
        return removed

    @contextlib.asynccontextmanager
    async def _writing(self, conn: asyncpg.Connection | None) -> AsyncIterator[asyncpg.Connection]:
        """The caller's connection (its transaction), or a new transaction of the pool."""
        if conn is not None:
            yield conn
            return
        async with db.transaction(self._pool) as tx:
            yield tx


def _parameter(config: McpServerConfig, column: str) -> Any:
    value = getattr(config, column)
    return list(value) if column == "args" else value
