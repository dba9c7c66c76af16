"""SQL of product installation beyond agent definitions and MCP servers (their
repositories have their own): locks and the request_id replay table. Every function runs
on the caller's connection (inside the caller's transaction) and is scoped by ``project_id``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import asyncpg

from agentfleet.errors import Unimplemented
from agentfleet.postgres import db

PRODUCT_COLUMNS = "p.id, p.project_id, p.name, p.version, p.manifest, p.installed_at, p.updated_at"


async def lock(conn: asyncpg.Connection, key: str) -> None:
    """Serialises installs of one product (and replays of one request_id) across every
    executor replica, until the transaction ends."""
    await db.lock_key(conn, key)


@dataclass(frozen=True, kw_only=True, slots=True)
class StoredRequest:
    """What an earlier InstallProduct with a ``request_id`` answered and asked."""

    response: dict[str, Any]
    request_fingerprint: str | None
    """Fingerprint of its manifest; None when recorded before migration 0022."""


async def stored_request(
    conn: asyncpg.Connection, project_id: str, request_id: str
) -> StoredRequest | None:
    """The request recorded for ``request_id``, or None for a new request."""
    try:
        row = await conn.fetchrow(
            "SELECT response, request_fingerprint FROM kb.product_install_requests "
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
    if row is None:
        return None
    return StoredRequest(response=row["response"], request_fingerprint=row["request_fingerprint"])


async def record_response(
    conn: asyncpg.Connection,
    project_id: str,
    request_id: str,
    product_name: str,
    response: dict[str, Any],
    request_fingerprint: str,
) -> None:
    """Records the response of ``request_id`` and what it asked, so a repeat returns it."""
    await conn.execute(
        "INSERT INTO kb.product_install_requests "
        "(project_id, request_id, product_name, response, request_fingerprint) "
        "VALUES ($1, $2, $3, $4::jsonb, $5)",
        project_id,
        request_id,
        product_name,
        response,
        request_fingerprint,
    )
