"""SQL of product installation beyond agent definitions and MCP servers (their
repositories have their own): locks and the request_id replay table. Every function runs
on the caller's connection (inside the caller's transaction) and is scoped by ``project_id``.
"""

from __future__ import annotations

from typing import Any

import asyncpg

from agentfleet import db
from agentfleet.errors import Unimplemented

PRODUCT_COLUMNS = "p.id, p.project_id, p.name, p.version, p.manifest, p.installed_at, p.updated_at"


async def lock(conn: asyncpg.Connection, key: str) -> None:
    """Serialises installs of one product (and replays of one request_id) across every
    executor replica, until the transaction ends."""
    await db.lock_key(conn, key)


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
