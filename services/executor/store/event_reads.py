"""Reads of ``kb.agent_run_events`` the executor needs beyond :mod:`agentfleet.events` (which
appends and replays them): finding again what a write cut off by a database outage had
committed, and which children a parent has recorded finished. Rows are in the shape
:func:`agentfleet.events.persisted_from_row` reads, from ``kb.agent_run_events_shown`` (the
events with the arguments and results their call rows hold). Keyed by run: callers hold the run or
read it by project first."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import asyncpg

Db = asyncpg.Pool | asyncpg.Connection

_COLUMNS = "run_id, root_run_id, seq, type, agent_name, is_internal, payload, created_at"


async def with_message(db: Db, run_id: str, seq: int) -> list[asyncpg.Record]:
    """The events committed in the transaction that wrote message ``seq``, in seq order
    (``now()`` is the transaction's start: they share the message's created_at)."""
    return await db.fetch(
        """
        SELECT e.run_id, e.root_run_id, e.seq, e.type, e.agent_name, e.is_internal, e.payload,
               e.created_at
        FROM kb.agent_run_messages m
        JOIN kb.agent_run_events_shown e ON e.run_id = m.run_id AND e.created_at = m.created_at
        WHERE m.run_id = $1::uuid AND m.seq = $2
        ORDER BY e.seq
        """,
        run_id,
        seq,
    )


async def newest(db: Db, run_id: str, count: int) -> list[asyncpg.Record]:
    """The run's ``count`` newest events, oldest first."""
    rows = await db.fetch(
        f"""
        SELECT {_COLUMNS}
        FROM kb.agent_run_events_shown WHERE run_id = $1::uuid
        ORDER BY seq DESC LIMIT $2
        """,
        run_id,
        count,
    )
    rows.reverse()
    return rows


async def created_at(db: Db, run_id: str, at: dt.datetime) -> list[asyncpg.Record]:
    """The run's events of the transaction that started at ``at``, in seq order."""
    return await db.fetch(
        f"""
        SELECT {_COLUMNS}
        FROM kb.agent_run_events_shown WHERE run_id = $1::uuid AND created_at = $2
        ORDER BY seq
        """,
        run_id,
        at,
    )


async def children_finished(db: Db, run_id: str, child_ids: Sequence[str]) -> set[str]:
    """Which of ``child_ids`` the run has recorded CHILD_RUN_FINISHED for."""
    rows = await db.fetch(
        """
        SELECT payload->>'child_run_id' AS child FROM kb.agent_run_events
        WHERE run_id = $1::uuid AND type = 'child_run_finished'
          AND payload->>'child_run_id' = ANY($2)
        """,
        run_id,
        list(child_ids),
    )
    return {r["child"] for r in rows}
