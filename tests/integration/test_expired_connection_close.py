"""asyncpg's pool closes the connections ``expire_connections`` retired (our retries do it at
each disconnect) in tasks nobody awaits; when the server is gone, such a close fails on the
dead socket and asyncio printed "Task exception was never retrieved" with a traceback into
the executor's log (the PostgreSQL restart test saw it once). The pool's loop counts that
failure in the outage log instead, and prints every other unretrieved exception as before."""

from __future__ import annotations

import asyncio
import logging

import asyncpg
import pytest

from agentfleet.postgres import db
from agentfleet.reconnect import quiet_expired_closes

NEVER_RETRIEVED = "Task exception was never retrieved"


async def test_creating_a_pool_installs_the_handler(database_url: str) -> None:
    pool = await db.create_pool(database_url)
    try:
        assert asyncio.get_running_loop().get_exception_handler() is quiet_expired_closes
    finally:
        await pool.close()


async def test_only_a_failed_close_of_a_connection_is_kept_out_of_the_log(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    loop = asyncio.get_running_loop()
    conn = await asyncpg.connect(database_url)
    conn.terminate()
    closing = loop.create_task(conn.close())  # as the pool's holder makes it
    other = loop.create_task(asyncio.sleep(0))
    await asyncio.gather(closing, other)
    broken, bug = BrokenPipeError(32, "Broken pipe"), ValueError("bug")

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        quiet_expired_closes(
            loop, {"message": NEVER_RETRIEVED, "exception": broken, "future": closing}
        )
        quiet_expired_closes(
            loop, {"message": NEVER_RETRIEVED, "exception": broken, "future": other}
        )
        quiet_expired_closes(
            loop, {"message": NEVER_RETRIEVED, "exception": bug, "future": closing}
        )

    printed = [r for r in caplog.records if r.name == "asyncio"]
    assert all(r.getMessage().startswith(NEVER_RETRIEVED) for r in printed), printed
    # The other task's broken pipe and the close's bug; not the close's broken pipe.
    assert [r.exc_info[1] if r.exc_info else None for r in printed] == [broken, bug]
