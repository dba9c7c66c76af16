"""Run events in ``kb.agent_run_events``: append with gapless seqs, read back, NOTIFY.

:func:`append_events` gives a run's events a gapless ``seq`` (1, 2, 3 ...), counted on the
run row (``last_event_seq``), inside the caller's transaction and sends ``NOTIFY
agentfleet_run_events, '<run_id>:<last seq>'``, delivered only at commit. :func:`read_events`
reads them back. Live streams and replays are identical because both are built from stored
rows. The statements are in ``run_events.sql``, with the executor's start and two step
writes that append a run's events in the statement that records the moment
(:data:`STATEMENTS`); those NOTIFY after they commit (:mod:`agentfleet.events.notifier`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeAlias

import asyncpg

from agentfleet.errors import NotFound
from agentfleet.events.domain import PersistedEvent, RunEvent, event_from_payload, event_payload
from agentfleet.events.proto import run_snapshot_of_json
from agentfleet.events.visibility import is_internal
from agentfleet.postgres.sql_blocks import Statement, compose, load_blocks

CHANNEL = "agentfleet_run_events"
"""NOTIFY channel; payload ``"<run_id>:<last seq>"``."""

_STATEMENTS, _FRAGMENTS = load_blocks(Path(__file__).with_name("run_events.sql"))
STATEMENTS: Mapping[str, Statement] = _STATEMENTS
"""Every statement that appends run events (``append_events``, ``record_start``,
``record_model_reply``, ``record_tool_results``) and ``read_events``, by name."""


def events_statement(name: str, text: str) -> Statement:
    """A statement written elsewhere that appends events with the fragments of
    ``run_events.sql`` (``-- include: insert_events``): it defines ``numbered`` (the run row,
    its ``last_event_seq`` raised) and ``calls_written`` as the file's statements do."""
    return compose(name, text, _FRAGMENTS, source=f"{name} (with run_events.sql)")


Connection: TypeAlias = asyncpg.Connection | asyncpg.Pool


def event_columns(
    *, project_id: str, run_id: str, root_run_id: str, events: Sequence[RunEvent]
) -> dict[str, Any]:
    """The parameters every appending statement takes: the run and the events as parallel
    arrays."""
    return {
        "run_id": run_id,
        "project_id": project_id,
        "root_run_id": root_run_id,
        "event_types": [e.type for e in events],
        "event_agents": [e.agent_name for e in events],
        # Classified here, so every appending statement stores the same visibility.
        "event_internal": [is_internal(e) for e in events],
        "event_payloads": [event_payload(e) for e in events],
    }


def persisted_from_row(row: Mapping[str, Any]) -> PersistedEvent:
    """A :class:`PersistedEvent` from a ``kb.agent_run_events`` row."""
    payload = row["payload"]
    if "run_row" in payload and row["type"] in ("run_queued", "run_finished"):
        payload = {"run": run_snapshot_of_json(payload["run_row"])}
    return PersistedEvent(
        run_id=str(row["run_id"]),
        root_run_id=str(row["root_run_id"]),
        seq=row["seq"],
        created_at=row["created_at"],
        event=event_from_payload(
            row["type"],
            agent_name=row["agent_name"],
            is_internal=row["is_internal"],
            payload=payload,
        ),
    )


async def append_events(
    conn: asyncpg.Connection,
    *,
    project_id: str,
    run_id: str,
    root_run_id: str,
    events: Sequence[RunEvent],
    notify: bool = True,
) -> list[PersistedEvent]:
    """Appends ``events`` to the run with the next gapless seqs and NOTIFYs listeners.

    One statement in the caller's transaction (or its own, outside one), so a step's
    messages, tool calls and events commit together; the NOTIFY is delivered at commit,
    never for a rollback (``notify`` False: none; the caller notifies once committed,
    :class:`~agentfleet.events.notifier.RunEventNotifier`). Concurrent appenders to one run
    queue on the run row's lock until the holder commits, so seqs never collide and never
    skip. Returns the events as stored
    (what a replay yields). :class:`NotFound` if the run is not in the project.
    """
    if not events:
        return []
    statement = STATEMENTS["append_events"]
    columns = event_columns(
        project_id=project_id, run_id=run_id, root_run_id=root_run_id, events=events
    )
    arguments = statement.arguments(columns | {"channel": CHANNEL, "notify": notify})
    rows = await conn.fetch(statement.text, *arguments)
    if not rows:
        raise NotFound(f"run {run_id} not found in project {project_id!r}")
    return sorted((persisted_from_row(row) for row in rows), key=lambda p: p.seq)


async def read_events(
    conn: Connection,
    *,
    project_id: str,
    run_id: str,
    after_seq: int = 0,
    include_internal: bool = False,
    limit: int = 1000,
) -> list[PersistedEvent]:
    """The run's events with seq > ``after_seq`` in seq order, at most ``limit``.

    Empty for a run of another project (callers check existence separately)."""
    statement = STATEMENTS["read_events"]
    arguments = statement.arguments(
        {
            "run_id": run_id,
            "project_id": project_id,
            "after_seq": after_seq,
            "include_internal": include_internal,
            "row_limit": limit,
        }
    )
    rows = await conn.fetch(statement.text, *arguments)
    return [persisted_from_row(row) for row in rows]


def parse_notification(payload: str) -> tuple[str, int] | None:
    """``"<run_id>:<seq>"`` -> (run_id, seq); None for anything else."""
    run_id, sep, seq = payload.rpartition(":")
    if not sep or not seq.isdigit():
        return None
    return run_id, int(seq)
