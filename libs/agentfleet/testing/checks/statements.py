"""Counting the statements a pool's connections send (asyncpg query loggers): an exact cost
per operation, which machine noise cannot move (tests and bench scripts)."""

from __future__ import annotations

import asyncpg

from agentfleet.postgres import db

__all__ = ["StatementCounter"]


class StatementCounter:
    """Counts the statements sent on the connections of the pools it makes."""

    def __init__(self) -> None:
        self.count = 0
        self.statements: list[str] = []
        """The text of each statement counted, in order."""

    def _log(self, record: asyncpg.connection.LoggedQuery) -> None:
        self.count += 1
        self.statements.append(record.query)

    async def _init(self, conn: asyncpg.Connection) -> None:
        await db._init_connection(conn)
        conn.add_query_logger(self._log)

    async def pool(self, url: str, *, min_size: int = 1, max_size: int = 10) -> asyncpg.Pool:
        """A pool set up as :func:`agentfleet.postgres.db.create_pool` sets one up, plus the
        count."""
        pool = await asyncpg.create_pool(
            url, min_size=min_size, max_size=max_size, init=self._init, reset=db._keep_session
        )
        assert pool is not None
        return pool
