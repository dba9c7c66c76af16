"""Group commit (DESIGN §4): concurrent runs' writes of one statement, committed together.

A write whose statement has none in flight goes at once, alone, exactly as it would without
grouping: a lone run waits for nothing. Writes that arrive while one is in flight queue, and
when it is done they go as one pipelined round trip (asyncpg's ``fetchmany``: one Bind and
Execute per write, one Sync), which PostgreSQL runs as one implicit transaction: one commit,
one WAL flush for all of them. Each caller still returns only once its write has committed,
so every guarantee of a single write holds (the step durable before its tool runs).

The group is all or nothing, so one write's error would undo the others: after a statement
error (the transaction rolled back, nothing of it is stored) each write runs again alone and
gets its own outcome. A lost connection is everyone's: its commit is unknown, and each
caller's :func:`~services.executor.store.write_guards.write_once` finds out whether it had
committed before it retries, as for a single write.

The statements say which run each row is for (``written_run_id``, the run row the write
updated), and a run's writes are sequential, so a group never holds two writes of one run.

A group holds its rows until it commits, so the order it takes them in matters: by project
(the ``C`` collation's order, Python's), then the write's ``order`` (an enqueue's counter
shard), then run id. Every project's usage rows are then
taken in one order by every group, and the statements that take several run rows at once
(:mod:`leases`: heartbeats, releases) take them in the same order, so no two of them wait
for each other in a cycle (a heartbeat and a group did, before: a deadlock PostgreSQL broke
after a second, failing the heartbeat).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from agentfleet.reconnect import is_disconnect

MAX_GROUP = 64
"""Writes in one round trip at most: a longer queue goes as several groups, one at a time,
so no write waits behind an unbounded batch."""
RUN_COLUMN = "written_run_id"
"""The column every grouped statement returns in each row: the run the row is for."""


@dataclass(slots=True)
class _Write:
    project_id: str
    run_id: str
    arguments: Sequence[Any]
    order: str
    done: asyncio.Future[list[asyncpg.Record]] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


@dataclass(slots=True)
class _Statement:
    in_flight: bool = False
    queued: list[_Write] = field(default_factory=list)


class GroupCommit:
    """One per process and pool (the executor's); not thread-safe: use it from the pool's
    event loop. ``enabled=False`` sends every write alone (for comparison)."""

    def __init__(self, pool: asyncpg.Pool, *, enabled: bool = True) -> None:
        self._pool = pool
        self._enabled = enabled
        self._statements: dict[str, _Statement] = {}
        self.groups = 0
        """Round trips that carried more than one write (for the bench)."""
        self.grouped_writes = 0

    async def fetch(
        self,
        text: str,
        arguments: Sequence[Any],
        *,
        project_id: str,
        run_id: str,
        order: str = "",
    ) -> list[asyncpg.Record]:
        """The rows of ``text`` run with ``arguments`` once it has committed, alone or
        with other runs' writes of the same statement. ``order``: where the write goes in
        its project's part of a group, before the run id (an enqueue's counter shard: the
        rows the group locks are then taken in one order)."""
        if not self._enabled:
            return await self._pool.fetch(text, *arguments)
        state = self._statements.setdefault(text, _Statement())
        if not state.in_flight:
            state.in_flight = True
            try:
                return await self._pool.fetch(text, *arguments)
            finally:
                self._next(text, state)
        write = _Write(project_id, run_id, arguments, order)
        state.queued.append(write)
        return await write.done

    def _next(self, text: str, state: _Statement) -> None:
        if not state.queued:
            state.in_flight = False
            return
        group, state.queued = state.queued[:MAX_GROUP], state.queued[MAX_GROUP:]
        task = asyncio.get_running_loop().create_task(self._commit(text, group))
        task.add_done_callback(lambda _: self._next(text, state))

    async def _commit(self, text: str, group: list[_Write]) -> None:
        if len(group) == 1 or len({w.run_id for w in group}) < len(group):
            await self._each_alone(text, group)
            return
        group.sort(key=lambda w: (w.project_id, w.order, w.run_id))
        try:
            rows = await self._pool.fetchmany(text, [w.arguments for w in group])
        except asyncpg.PostgresError as exc:
            if is_disconnect(exc):
                _fail(group, exc)
            else:
                await self._each_alone(text, group)
            return
        except BaseException as exc:  # a lost connection, a closing pool: as for one write
            _fail(group, exc)
            if not isinstance(exc, Exception):
                raise
            return
        self.groups += 1
        self.grouped_writes += len(group)
        by_run: dict[str, list[asyncpg.Record]] = {w.run_id: [] for w in group}
        for row in rows:
            by_run[str(row[RUN_COLUMN])].append(row)
        for write in group:
            if not write.done.done():
                write.done.set_result(by_run[write.run_id])

    async def _each_alone(self, text: str, group: list[_Write]) -> None:
        async def alone(write: _Write) -> None:
            try:
                rows = await self._pool.fetch(text, *write.arguments)
            except BaseException as exc:
                _fail([write], exc)
                if not isinstance(exc, Exception):
                    raise
            else:
                if not write.done.done():
                    write.done.set_result(rows)

        await asyncio.gather(*(alone(w) for w in group))


def _fail(group: list[_Write], exc: BaseException) -> None:
    for write in group:
        if not write.done.done():
            write.done.set_exception(exc)
