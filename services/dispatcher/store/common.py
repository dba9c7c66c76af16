"""Pieces every store module shares: the task columns, the blocker conditions and the
NOTIFY channels (with their senders) that wake dispatchers and watchers at commit."""

from __future__ import annotations

import asyncpg

from agentfleet.graph import BLOCKS
from agentfleet.graph import TASK_CHANGES_CHANNEL as CHANGES_CHANNEL
from agentfleet.graph import notify_task_changes as notify_changes

__all__ = [
    "CHANGES_CHANNEL",
    "DEAD_BLOCKER",
    "READY_CHANNEL",
    "T_COLUMNS",
    "UNFINISHED_BLOCKER",
    "notify_changes",
    "notify_ready",
]

READY_CHANNEL = "agentfleet_tasks_ready"
"""NOTIFY channel (payload: project id) when tasks may have become available (dispatchers)."""

T_COLUMNS = (
    "t.id, t.project_id, t.type, t.key, t.properties, t.status, t.version, t.created_at, "
    "t.updated_at"
)
# "Some blocker is not completed" and "some blocker is a dead end", for the task aliased t.
UNFINISHED_BLOCKER = f"""
    EXISTS (SELECT 1 FROM kb.graph_relationships r JOIN kb.graph_objects b ON b.id = r.src_id
            WHERE r.project_id = t.project_id AND r.dst_id = t.id AND r.type = '{BLOCKS}'
              AND b.status IS DISTINCT FROM 'completed')"""
DEAD_BLOCKER = f"""
    EXISTS (SELECT 1 FROM kb.graph_relationships r JOIN kb.graph_objects b ON b.id = r.src_id
            WHERE r.project_id = t.project_id AND r.dst_id = t.id AND r.type = '{BLOCKS}'
              AND b.status IN ('failed', 'paused', 'cancelled'))"""


async def notify_ready(conn: asyncpg.Connection, project_id: str) -> None:
    """Wakes dispatchers: tasks of the project may have become available."""
    await conn.execute("SELECT pg_notify($1, $2)", READY_CHANNEL, project_id)
