"""How the writes of one run reach the database (DESIGN §4): its messages numbered in one
``seq`` series, each write retried on a new connection through a PostgreSQL restart or
failover (:mod:`write_guards`), a retry first checking whether the cut attempt had
committed, so nothing is written twice. What each moment writes is :mod:`persistence`'s."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import asyncpg
from google.genai import types

from agentfleet import events
from agentfleet.llm import content_to_json
from services.executor.runs import RunRecord, RunStatus
from services.executor.store import messages as message_rows
from services.executor.store import runs as run_rows
from services.executor.store.group_commit import GroupCommit
from services.executor.store.write_guards import (
    events_appended,
    events_with_message,
    finished_with,
    message_written,
    write_once,
)

_WHAT = "recording a run"
"""What the executor was doing, in the warning of a database outage."""


class RunWriter:
    """Writes of one run, once each; the recorder's only way to the database."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        run: RunRecord,
        *,
        next_message_seq: int,
        notifier: events.RunEventNotifier,
        group: GroupCommit,
    ) -> None:
        self.pool = pool
        self.run = run
        """The run written (only its identity is read: id, project, root, agent)."""
        self._notifier = notifier
        self._group = group
        self.next_seq = next_message_seq
        """seq of the next message."""

    async def events_once(
        self,
        write: Callable[[], Awaitable[list[events.PersistedEvent]]],
        batch: Sequence[events.RunEvent],
    ) -> list[events.PersistedEvent]:
        """Runs a transaction that appends ``batch`` (no message), never twice."""

        async def committed() -> list[events.PersistedEvent] | None:
            rows = await events_appended(self.pool, run_id=self.run.id, batch=batch)
            return None if rows is None else [events.persisted_from_row(r) for r in rows]

        return await write_once(write, committed=committed, what=_WHAT, pool=self.pool)

    async def finish(
        self,
        batch: Sequence[events.RunEvent],
        *,
        status: RunStatus,
        summary: str | None,
        error_message: str | None,
        output: dict[str, Any] | None,
    ) -> RunRecord | None:
        """Ends the running run with ``status`` and ``batch`` (its last a RUN_FINISHED whose
        ``run`` is {}: the statement stores the row it wrote), in one statement shared with
        other runs' ends ready at the same time (:data:`~services.executor.store.runs.
        RECORD_FINISH`), never twice; the final row, or None when the run had already moved
        on (nothing written)."""
        run = self.run
        statement = run_rows.RECORD_FINISH
        columns = events.event_columns(
            project_id=run.project_id, run_id=run.id, root_run_id=run.root_run_id, events=batch
        )
        arguments = statement.arguments(
            columns
            | {
                "status": status,
                "summary": summary,
                "error_message": error_message,
                "output": output,
                "from_statuses": ["running"],
            }
        )

        async def write() -> tuple[RunRecord | None, int]:
            rows = await self._grouped(statement.text, arguments)
            if not rows:
                return None, 0
            return RunRecord.from_row(rows[0]), max(row["seq"] for row in rows)

        async def committed() -> tuple[RunRecord | None, int] | None:
            found = await finished_with(self.pool, run, status)
            if found is None:
                return None
            return found[0], max((row["seq"] for row in found[1]), default=0)

        finished, last_seq = await write_once(
            write, committed=committed, what=_WHAT, pool=self.pool
        )
        if last_seq:
            self._notifier.committed(run.id, last_seq)
        return finished

    async def insert_message(
        self,
        conn: asyncpg.Connection,
        step: int,
        role: str,
        content: types.Content,
        *,
        tokens: int = 0,
        is_internal: bool = False,
    ) -> str:
        seq = self.next_seq
        message_id = await message_rows.insert(
            conn,
            self.run.id,
            seq=seq,
            step=step,
            role=role,
            agent_name=self.run.agent_name,
            content=content_to_json(content),
            tokens=tokens,
            is_internal=is_internal,
        )
        self.next_seq = seq + 1
        return message_id

    async def step(
        self,
        name: str,
        batch: Sequence[events.RunEvent],
        *,
        step: int,
        content: types.Content,
        tokens: int,
        rows: dict[str, Any],
    ) -> list[asyncpg.Record] | None:
        """Runs the step statement ``name`` of :data:`agentfleet.events.STATEMENTS` (one
        message). ``rows``: the statement's own parameters (the call rows). As
        :meth:`_statement`."""
        return await self._statement(
            name,
            batch,
            messages=1,
            parameters=rows | {"step": step, "content": content_to_json(content), "tokens": tokens},
        )

    async def start(
        self,
        batch: Sequence[events.RunEvent],
        *,
        messages: Sequence[tuple[str, types.Content]],
        trace_id: str | None,
    ) -> list[asyncpg.Record] | None:
        """The ``record_start`` statement: the opening ``messages`` (role, content), the trace
        id if the run has none, and ``batch``. As :meth:`_statement`."""
        return await self._statement(
            "record_start",
            batch,
            messages=len(messages),
            parameters={
                "message_roles": [role for role, _ in messages],
                "message_contents": [content_to_json(content) for _, content in messages],
                "trace_id": trace_id,
            },
        )

    async def _statement(
        self,
        name: str,
        batch: Sequence[events.RunEvent],
        *,
        messages: int,
        parameters: dict[str, Any],
    ) -> list[asyncpg.Record] | None:
        """Runs ``name`` outside any transaction block: a single statement commits on its
        own, so this is one round trip, shared with other runs' writes of ``name`` that are
        ready at the same time (:mod:`group_commit`); followers are notified once it has
        committed. Its
        ``messages`` messages are numbered from :attr:`next_seq`. The rows of the stored
        events (one row of nulls when there is none), or None when the run row did not
        qualify (nothing was written)."""
        run = self.run
        seq = self.next_seq
        statement = events.STATEMENTS[name]
        columns = events.event_columns(
            project_id=run.project_id, run_id=run.id, root_run_id=run.root_run_id, events=batch
        )
        arguments = statement.arguments(
            columns | parameters | {"message_seq": seq, "agent_name": run.agent_name}
        )
        # A cut attempt that had committed wrote the message at ``seq`` (a retried one
        # would fail on its unique seq anyway, writing nothing).
        earlier: list[list[asyncpg.Record]] = []

        async def committed() -> list[asyncpg.Record] | None:
            if not await message_written(self.pool, run_id=run.id, seq=seq):
                return None
            earlier.append(await events_with_message(self.pool, run_id=run.id, seq=seq))
            return earlier[0]

        stored_rows = await write_once(
            lambda: self._grouped(statement.text, arguments),
            committed=committed,
            what=_WHAT,
            pool=self.pool,
        )
        if not stored_rows and not earlier:
            return None
        self.next_seq = seq + messages
        last_seq = max((row["seq"] for row in stored_rows if row["seq"] is not None), default=0)
        if last_seq:
            self._notifier.committed(run.id, last_seq)
        return stored_rows

    async def quota_wait(
        self,
        batch: Sequence[events.RunEvent],
        *,
        quota_wait: dict[str, Any] | None,
        lease_owner: str,
    ) -> bool:
        """The ``record_quota_wait`` statement (the run's wait, set or cleared, and
        ``batch``), never twice; False when the run row did not qualify (lease lost, run no
        longer running) and nothing was written."""
        run = self.run
        statement = events.STATEMENTS["record_quota_wait"]
        columns = events.event_columns(
            project_id=run.project_id, run_id=run.id, root_run_id=run.root_run_id, events=batch
        )
        arguments = statement.arguments(
            columns | {"quota_wait": quota_wait, "lease_owner": lease_owner}
        )

        async def committed() -> list[asyncpg.Record] | None:
            return await events_appended(self.pool, run_id=run.id, batch=batch)

        rows = await write_once(
            lambda: self._grouped(statement.text, arguments),
            committed=committed,
            what=_WHAT,
            pool=self.pool,
        )
        last_seq = max((row["seq"] for row in rows if row["seq"] is not None), default=0)
        if last_seq:
            self._notifier.committed(run.id, last_seq)
        return bool(last_seq)

    async def _grouped(self, text: str, arguments: Sequence[Any]) -> list[asyncpg.Record]:
        return await self._group.fetch(
            text, arguments, project_id=self.run.project_id, run_id=self.run.id
        )

    async def with_messages(
        self,
        write: Callable[[], Awaitable[list[events.PersistedEvent]]],
        *,
        first_seq: int,
        messages: int,
    ) -> list[events.PersistedEvent]:
        """Runs a transaction that adds ``messages`` messages from ``first_seq`` (and
        events), through database outages, never twice."""

        async def committed() -> list[events.PersistedEvent] | None:
            if not await message_written(self.pool, run_id=self.run.id, seq=first_seq):
                return None
            self.next_seq = first_seq + messages
            rows = await events_with_message(self.pool, run_id=self.run.id, seq=first_seq)
            return [events.persisted_from_row(r) for r in rows]

        return await write_once(write, committed=committed, what=_WHAT, pool=self.pool)

    async def append(
        self, conn: asyncpg.Connection, batch: Sequence[events.RunEvent]
    ) -> list[events.PersistedEvent]:
        if not batch:
            return []
        return await events.append_events(
            conn,
            project_id=self.run.project_id,
            run_id=self.run.id,
            root_run_id=self.run.root_run_id,
            events=batch,
        )
