"""Every row of some ``kb`` tables as text, to prove a refused call wrote nothing."""

from __future__ import annotations

from collections.abc import Iterable

import asyncpg


async def table_rows(pool: asyncpg.Pool, tables: Iterable[str]) -> dict[str, list[str]]:
    """Table name -> its rows as sorted text (a table name is code, never input)."""
    out = {}
    for table in tables:
        rows = await pool.fetch(f"SELECT t::text AS row FROM kb.{table} t")
        out[table] = sorted(r["row"] for r in rows)
    return out
