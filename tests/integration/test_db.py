"""agentfleet.postgres.db and agentfleet.postgres.embedded_pg against a real PostgreSQL."""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncpg
import pytest

from agentfleet.errors import Unavailable
from agentfleet.postgres import db
from agentfleet.postgres.db import Listener, Notification
from agentfleet.postgres.embedded_pg import EmbeddedPostgres

DEADLINE_S = 10.0


async def test_jsonb_round_trips_python_values(db_pool: asyncpg.Pool) -> None:
    properties = {
        "title": "Ünïcode ✓",
        "nested": {"list": [1, 2.5, None, True], "empty": {}},
        "quote": 'say "hi"',
    }

    stored = await db_pool.fetchval(
        "INSERT INTO kb.graph_objects (project_id, type, properties)"
        " VALUES ($1, $2, $3) RETURNING properties",
        "demo",
        "Note",
        properties,
    )

    assert stored == properties
    assert await db_pool.fetchval("SELECT '[1, {\"a\": null}]'::json") == [1, {"a": None}]


async def test_transaction_commits_on_success(db_pool: asyncpg.Pool) -> None:
    async with db.transaction(db_pool) as conn:
        await conn.execute(
            "INSERT INTO kb.project_secrets (project_id, name, value) VALUES ('demo', 'A', 'x')"
        )

    assert await db_pool.fetchval("SELECT count(*) FROM kb.project_secrets") == 1


async def _insert_two_then_fail(pool: asyncpg.Pool) -> None:
    async with db.transaction(pool) as conn:
        for name in ("A", "B"):
            await conn.execute(
                "INSERT INTO kb.project_secrets (project_id, name, value) VALUES ('demo', $1, 'x')",
                name,
            )
        raise RuntimeError("boom")


async def test_transaction_rollback_leaves_nothing(db_pool: asyncpg.Pool) -> None:
    with pytest.raises(RuntimeError, match="boom"):
        await _insert_two_then_fail(db_pool)

    assert await db_pool.fetchval("SELECT count(*) FROM kb.project_secrets") == 0


async def _next(queue: asyncio.Queue[Notification]) -> Notification:
    return await asyncio.wait_for(queue.get(), timeout=DEADLINE_S)


async def test_listener_delivers_to_queues_and_callbacks(
    database_url: str, db_pool: asyncpg.Pool
) -> None:
    queue: asyncio.Queue[Notification] = asyncio.Queue()
    seen: list[Notification] = []
    async with Listener(database_url) as listener:
        await listener.subscribe("runs", queue)
        await listener.subscribe("runs", seen.append)
        await listener.subscribe("other", queue)

        await db.notify(db_pool, "runs", "run-1:3")

        assert await _next(queue) == Notification(channel="runs", payload="run-1:3")
        # Callbacks run before the queue item is consumed: both are called in one loop pass.
        assert seen == [Notification(channel="runs", payload="run-1:3")]

        await listener.unsubscribe("runs", queue)
        await listener.unsubscribe("runs", seen.append)
        await db.notify(db_pool, "runs", "after unsubscribe")
        await db.notify(db_pool, "other", "still listening")
        # Notifications of one sender arrive in order: had "runs" still been delivered,
        # it would be first in the queue.
        assert await _next(queue) == Notification(channel="other", payload="still listening")
        assert len(seen) == 1


async def _notify_then_fail(pool: asyncpg.Pool) -> None:
    async with db.transaction(pool) as conn:
        await db.notify(conn, "runs", "rolled back")
        raise RuntimeError("abort")


async def test_notify_in_a_transaction_is_sent_only_on_commit(
    database_url: str, db_pool: asyncpg.Pool
) -> None:
    queue: asyncio.Queue[Notification] = asyncio.Queue()
    async with Listener(database_url) as listener:
        await listener.subscribe("runs", queue)
        with pytest.raises(RuntimeError):
            await _notify_then_fail(db_pool)
        async with db.transaction(db_pool) as conn:
            await db.notify(conn, "runs", "committed")

        assert (await _next(queue)).payload == "committed"


async def test_listener_survives_a_terminated_connection(
    database_url: str, db_pool: asyncpg.Pool
) -> None:
    queue: asyncio.Queue[Notification] = asyncio.Queue()
    reconnected = asyncio.Event()
    async with Listener(database_url) as listener:
        listener.add_reconnect_callback(reconnected.set)
        await listener.subscribe("runs", queue)
        await listener.subscribe("tasks", queue)
        old_pid = listener.backend_pid
        assert old_pid is not None

        assert await db_pool.fetchval("SELECT pg_terminate_backend($1)", old_pid)
        await asyncio.wait_for(reconnected.wait(), timeout=DEADLINE_S)

        assert listener.connected
        assert listener.backend_pid not in (None, old_pid)
        await db.notify(db_pool, "runs", "after reconnect")
        await db.notify(db_pool, "tasks", "both channels")
        assert (await _next(queue)).payload == "after reconnect"
        assert (await _next(queue)).payload == "both channels"


async def test_listener_close_is_idempotent(database_url: str) -> None:
    listener = Listener(database_url)
    await listener.start()
    await listener.close()
    await listener.close()
    assert not listener.connected


UNREACHABLE = [
    "postgresql://agentfleet:secret@127.0.0.1:1/agentfleet",
    "postgresql://postgres@/agentfleet?host=/nonexistent-socket-dir",
]


@pytest.mark.parametrize("dsn", UNREACHABLE)
async def test_unreachable_server_is_unavailable(dsn: str) -> None:
    with pytest.raises(Unavailable, match="cannot connect to PostgreSQL at") as caught:
        await db.create_pool(dsn, min_size=1, max_size=1, connect_timeout_s=5)
    assert "secret" not in caught.value.message

    with pytest.raises(Unavailable):
        await db.connect(dsn, connect_timeout_s=5)
    with pytest.raises(Unavailable):
        await Listener(dsn).start()


async def test_an_unknown_database_is_unavailable(database_url: str) -> None:
    with pytest.raises(Unavailable, match="does not exist"):
        await db.connect(db.replace_database(database_url, "no_such_database"))


def test_redact_hides_the_password() -> None:
    assert db.redact("postgresql://u:pw@h:5432/d?x=1") == "postgresql://u:***@h:5432/d?x=1"
    assert db.redact("postgresql://u@h/d") == "postgresql://u@h/d"


async def test_embedded_postgres_is_reused_across_starts(tmp_path: Path) -> None:
    first = EmbeddedPostgres(tmp_path / "pg", durable=False)
    url = await first.start()
    try:
        conn = await db.connect(url)
        await conn.execute("CREATE TABLE kept (id int)")
        await conn.close()

        # A second start on the same folder attaches to the running server.
        second = EmbeddedPostgres(tmp_path / "pg", durable=False)
        assert await second.start() == url
        assert not second.started
        second.stop()  # not its server: a no-op

        # Stopped and started again, the data is still there.
        first.stop()
        third = EmbeddedPostgres(tmp_path / "pg", durable=False)
        url = await third.start()
        assert third.started
        conn = await db.connect(url)
        assert await conn.fetchval("SELECT to_regclass('kept')::text") == "kept"
        await conn.close()
        third.stop()
    finally:
        first.remove()  # As root the cluster may live outside tmp_path.


async def test_embedded_postgres_refuses_a_folder_that_is_not_a_cluster(tmp_path: Path) -> None:
    data = tmp_path / "pg"
    data.mkdir()
    (data / "notes.txt").write_text("not a database")

    with pytest.raises(Unavailable, match="is not empty and holds no PostgreSQL cluster"):
        await EmbeddedPostgres(data, durable=False).start()
