"""Statements every table of named project rows shares (``kb.agent_definitions``,
``kb.mcp_servers``, ``kb.project_secrets``, ``kb.products``: each unique on ``project_id, name``).

Deleting one row by name, deleting the rows of a product it no longer lists, and one page of
a listing ordered by name are the same statement whichever table they run on: the
repositories of those tables call these instead of writing each its own.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import asyncpg

from agentfleet.postgres.pagination import (
    clamp_page_size,
    decode_page_token,
    encode_page_token,
    page_of,
)

__all__ = ["Db", "delete_named", "delete_product_rows", "name_page", "project_name_page"]

_NAMED_TABLES = frozenset({"kb.agent_definitions", "kb.mcp_servers", "kb.project_secrets"})
_PRODUCT_TABLES = frozenset({"kb.agent_definitions", "kb.mcp_servers"})
"""Tables whose rows a product owns (``product_id``)."""

Rows = Sequence[Mapping[str, Any]]
Db = asyncpg.Pool | asyncpg.Connection
"""Where a statement runs: the pool, or a connection (inside its transaction)."""


async def delete_named(db: Db, table: str, project_id: str, name: str) -> bool:
    """Deletes the project's row ``name`` of ``table``; whether there was one."""
    _check(table, _NAMED_TABLES)
    deleted = await db.fetchval(
        f"DELETE FROM {table} WHERE project_id = $1 AND name = $2 RETURNING id",
        project_id,
        name,
    )
    return deleted is not None


async def delete_product_rows(
    db: Db, table: str, project_id: str, product_id: uuid.UUID | str, keep: Sequence[str]
) -> list[str]:
    """Deletes the rows of ``table`` the product owns and ``keep`` does not name; their
    names, sorted (``keep`` empty: every row of the product, as when it is uninstalled)."""
    _check(table, _PRODUCT_TABLES)
    rows = await db.fetch(
        f"DELETE FROM {table} WHERE project_id = $1 AND product_id = $2::uuid "
        "AND NOT (name = ANY($3::text[])) RETURNING name",
        project_id,
        str(product_id),
        list(keep),
    )
    return sorted(r["name"] for r in rows)


async def name_page(
    fetch: Callable[[str | None, int], Awaitable[Rows]],
    *,
    page_size: int,
    page_token: str,
    filters: Mapping[str, Any],
) -> tuple[Rows, str]:
    """One page of a listing ordered by ``name``, and the token of the next ('' at the end).

    ``fetch(after, limit)`` returns at most ``limit`` rows whose name sorts after ``after``
    (None: from the first), by name; ``filters`` are what the token is valid for.
    """
    size = clamp_page_size(page_size)
    position = decode_page_token(page_token, filters, kinds=(str,))
    rows = await fetch(position[0] if position else None, size + 1)
    page, more = page_of(rows, size)
    return page, encode_page_token([page[-1]["name"]], filters) if more else ""


async def project_name_page(
    db: Db,
    select: str,
    *,
    alias: str,
    project_id: str,
    page_size: int,
    page_token: str,
    listing: str,
) -> tuple[Rows, str]:
    """One page of the project's rows by name: ``select`` is a ``SELECT ... FROM ...`` (no
    WHERE) whose listed table has the alias ``alias``; ``listing`` names the list, so a token of
    one list is refused by another. ``select`` and ``alias`` are formatted into the SQL: the
    code's own constants, never a caller's string (the project and the position are bound)."""
    return await name_page(
        lambda after, limit: db.fetch(
            f"""{select}
                WHERE {alias}.project_id = $1 AND ($2::text IS NULL OR {alias}.name > $2::text)
                ORDER BY {alias}.name LIMIT $3""",
            project_id,
            after,
            limit,
        ),
        page_size=page_size,
        page_token=page_token,
        filters={"project_id": project_id, "list": listing},
    )


def _check(table: str, allowed: frozenset[str]) -> None:
    # Table names are formatted into the SQL: only the known ones, never a caller's string.
    if table not in allowed:
        raise ValueError(f"not a table of named project rows: {table!r}")
