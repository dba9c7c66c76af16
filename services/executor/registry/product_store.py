"""SQL of product installation beyond agent definitions: locks, MCP server rows, and the
request_id replay table. Every function runs on the caller's connection (inside the
caller's transaction) and is scoped by ``project_id``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Literal

import asyncpg

from agentfleet.errors import AlreadyExists, Unimplemented
from services.executor.registry.manifest import McpServerSpec

PRODUCT_COLUMNS = "p.id, p.project_id, p.name, p.version, p.manifest, p.installed_at, p.updated_at"


@dataclass(frozen=True, kw_only=True, slots=True)
class StoredMcpServer:
    """An MCP server row of the project with its owner."""

    spec: McpServerSpec
    product_id: uuid.UUID | None
    """None when created directly (toolpool UpsertMcpServer)."""
    product_name: str


async def lock(conn: asyncpg.Connection, key: str) -> None:
    """Transaction-scoped advisory lock on ``key``: serialises installs of one product (and
    replays of one request_id) across every executor replica."""
    await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", key)


async def mcp_servers_of(conn: asyncpg.Connection, project_id: str) -> dict[str, StoredMcpServer]:
    """Every MCP server of the project by name."""
    rows = await conn.fetch(
        """
        SELECT s.name, s.transport, s.command, s.args, s.env, s.url, s.headers, s.tool_prefix,
               s.enabled, s.connect_timeout_s, s.call_timeout_s, s.product_id,
               coalesce(p.name, '') AS product_name
        FROM kb.mcp_servers s LEFT JOIN kb.products p ON p.id = s.product_id
        WHERE s.project_id = $1
        """,
        project_id,
    )
    return {
        r["name"]: StoredMcpServer(
            spec=McpServerSpec(
                name=r["name"],
                transport=r["transport"],
                command=r["command"],
                args=list(r["args"]),
                env=dict(r["env"]),
                url=r["url"],
                headers=dict(r["headers"]),
                tool_prefix=r["tool_prefix"],
                enabled=r["enabled"],
                connect_timeout_s=r["connect_timeout_s"],
                call_timeout_s=r["call_timeout_s"],
            ),
            product_id=r["product_id"],
            product_name=r["product_name"],
        )
        for r in rows
    }


async def upsert_mcp_server(
    conn: asyncpg.Connection, project_id: str, product_id: uuid.UUID, server: McpServerSpec
) -> None:
    """Creates or replaces the product's MCP server ``server.name``.

    :class:`AlreadyExists` if a server of that name belongs to no product or another one
    (checked before by the installer; this closes the race with a concurrent write).
    """
    status = await conn.execute(
        """
        INSERT INTO kb.mcp_servers (
            project_id, name, transport, command, args, env, url, headers, tool_prefix,
            enabled, connect_timeout_s, call_timeout_s, product_id)
        VALUES ($1, $2, $3, $4, $5::text[], $6::jsonb, $7, $8::jsonb, $9, $10, $11, $12,
                $13::uuid)
        ON CONFLICT (project_id, name) DO UPDATE SET
            transport = excluded.transport, command = excluded.command, args = excluded.args,
            env = excluded.env, url = excluded.url, headers = excluded.headers,
            tool_prefix = excluded.tool_prefix, enabled = excluded.enabled,
            connect_timeout_s = excluded.connect_timeout_s,
            call_timeout_s = excluded.call_timeout_s, updated_at = now()
        WHERE kb.mcp_servers.product_id = excluded.product_id
        """,
        project_id,
        server.name,
        server.transport,
        server.command,
        server.args,
        server.env,
        server.url,
        server.headers,
        server.tool_prefix,
        server.enabled,
        server.connect_timeout_s,
        server.call_timeout_s,
        product_id,
    )
    if status.endswith(" 0"):
        raise AlreadyExists(
            f"MCP server {server.name!r} already exists in project {project_id!r} and "
            "belongs to no product or another one"
        )


_OWNED_TABLES = {"agents": "kb.agent_definitions", "mcp_servers": "kb.mcp_servers"}


async def remove_unlisted(
    conn: asyncpg.Connection,
    kind: Literal["agents", "mcp_servers"],
    project_id: str,
    product_id: uuid.UUID,
    keep: list[str],
) -> list[str]:
    """Deletes the product's definitions or MCP servers not named in ``keep``; their names."""
    rows = await conn.fetch(
        f"DELETE FROM {_OWNED_TABLES[kind]} WHERE project_id = $1 AND product_id = $2::uuid "
        "AND NOT (name = ANY($3::text[])) RETURNING name",
        project_id,
        product_id,
        keep,
    )
    return sorted(r["name"] for r in rows)


async def stored_response(
    conn: asyncpg.Connection, project_id: str, request_id: str
) -> dict[str, Any] | None:
    """The response recorded for ``request_id``, or None for a new request."""
    try:
        return await conn.fetchval(
            "SELECT response FROM kb.product_install_requests "
            "WHERE project_id = $1 AND request_id = $2",
            project_id,
            request_id,
        )
    except asyncpg.UndefinedTableError as exc:
        # The replay table arrives with its own migration; say so instead of INTERNAL.
        raise Unimplemented(
            "request_id is not supported by this database yet (kb.product_install_requests "
            "is missing); retry without request_id"
        ) from exc


async def record_response(
    conn: asyncpg.Connection,
    project_id: str,
    request_id: str,
    product_name: str,
    response: dict[str, Any],
) -> None:
    """Records the response of ``request_id`` so a repeat returns it."""
    await conn.execute(
        "INSERT INTO kb.product_install_requests (project_id, request_id, product_name, response) "
        "VALUES ($1, $2, $3, $4::jsonb)",
        project_id,
        request_id,
        product_name,
        response,
    )
