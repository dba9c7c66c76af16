"""The event store on a real PostgreSQL: gapless seqs under concurrency, NOTIFY at commit."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from agentfleet import events as ev
from agentfleet.errors import NotFound
from agentfleet.postgres.db import Listener, Notification
from agentfleet.testing import factories as f

PROJECT = "events-proj"


async def _run(pool: asyncpg.Pool) -> dict:
    return await f.insert_run(pool, project_id=PROJECT, agent_name="writer", status="running")


async def test_concurrent_appenders_get_gapless_distinct_seqs(db_pool: asyncpg.Pool) -> None:
    run = await _run(db_pool)
    started = asyncio.Event()

    async def one_writer(i: int) -> list[int]:
        async with db_pool.acquire() as conn, conn.transaction():
            await started.wait()
            stored = await f.append(
                conn,
                run=run,
                events=[
                    ev.ModelText(agent_name="writer", text=f"w{i}-a", step=i),
                    ev.ModelText(agent_name="writer", text=f"w{i}-b", step=i),
                ],
            )
            await asyncio.sleep(0)  # hold the transaction open across a loop turn
            return [p.seq for p in stored]

    tasks = [asyncio.create_task(one_writer(i)) for i in range(20)]
    started.set()
    results = await asyncio.gather(*tasks)
    # Each call's events are consecutive, and all together are exactly 1..40.
    for seqs in results:
        assert seqs == [seqs[0], seqs[0] + 1]
    assert sorted(s for seqs in results for s in seqs) == list(range(1, 41))
    stored = await ev.read_events(db_pool, project_id=PROJECT, run_id=str(run["id"]), limit=100)
    assert [p.seq for p in stored] == list(range(1, 41))
    # The two events of one call stay together in the series.
    for a, b in zip(stored[::2], stored[1::2], strict=True):
        assert a.event.text.removesuffix("-a") == b.event.text.removesuffix("-b")  # type: ignore[union-attr]


async def _append_then_roll_back(conn: asyncpg.Connection, run: dict, events: list) -> None:
    async with conn.transaction():
        await f.append(conn, run=run, events=events)
        raise RuntimeError("step failed")


async def test_a_rolled_back_append_leaves_no_gap(db_pool: asyncpg.Pool) -> None:
    run = await _run(db_pool)
    text = [ev.ModelText(agent_name="writer", text="x", step=1)]
    async with db_pool.acquire() as conn:
        with pytest.raises(RuntimeError):
            await _append_then_roll_back(conn, run, text)
        stored = await f.append(conn, run=run, events=text)
    assert [p.seq for p in stored] == [1]


async def test_notify_arrives_on_commit_only(db_pool: asyncpg.Pool, database_url: str) -> None:
    run = await _run(db_pool)
    run_id = str(run["id"])
    received: asyncio.Queue[Notification] = asyncio.Queue()
    async with Listener(database_url) as listener:
        await listener.subscribe(ev.CHANNEL, received)
        async with db_pool.acquire() as conn:
            with pytest.raises(RuntimeError):
                await _append_then_roll_back(conn, run, f.start_events(run))
            async with conn.transaction():
                stored = await f.append(conn, run=run, events=f.start_events(run))
                # Still uncommitted: the listener must not hear of it yet. A round trip on
                # another connection proves the server has had every chance to deliver.
                await db_pool.execute("SELECT pg_notify($1, 'marker')", ev.CHANNEL)
                marker = await asyncio.wait_for(received.get(), 5)
                assert marker.payload == "marker"
        note = await asyncio.wait_for(received.get(), 5)
    assert ev.parse_notification(note.payload) == (run_id, 3)
    assert [p.seq for p in stored] == [1, 2, 3]
    assert received.empty()


async def test_append_to_a_run_of_another_project_is_not_found(db_pool: asyncpg.Pool) -> None:
    run = await _run(db_pool)
    async with db_pool.acquire() as conn:
        with pytest.raises(NotFound):
            await ev.append_events(
                conn,
                project_id="someone-else",
                run_id=str(run["id"]),
                root_run_id=str(run["root_run_id"]),
                events=[ev.ModelText(agent_name="writer", text="x", step=1)],
            )
    assert await ev.read_events(db_pool, project_id=PROJECT, run_id=str(run["id"])) == []


async def test_stored_events_replay_identically(db_pool: asyncpg.Pool) -> None:
    run = await _run(db_pool)
    events = [
        *f.start_events(run),
        *f.step_events(run, step=1, tool_call_id="call-1"),
        ev.ChildRunStarted(
            agent_name="writer",
            is_internal=True,
            child_run_id="00000000-0000-0000-0000-000000000001",
            child_agent_name="helper",
            description="help",
            tool_call_id="call-2",
        ),
        ev.Safety(
            agent_name="writer", kind="doom_loop_warning", message="3rd repeat", details={"n": 3}
        ),
        *f.finish_events(run),
    ]
    live = await f.append(db_pool, run=run, events=events)
    replay = await ev.read_events(
        db_pool, project_id=PROJECT, run_id=str(run["id"]), include_internal=True
    )
    assert replay == live

    def wire(items: list[ev.PersistedEvent]) -> list[bytes]:
        return [
            ev.to_proto(p, parent_run_id=None, trace_id=run["trace_id"]).SerializeToString()
            for p in items
        ]

    assert wire(replay) == wire(live)
    public = await ev.read_events(db_pool, project_id=PROJECT, run_id=str(run["id"]))
    # 7 was written internal; 8, a doom-loop warning, is internal by its kind
    # (agentfleet.events.visibility), stored so whatever its writer said.
    assert [p.seq for p in public] == [s for s in range(1, len(events) + 1) if s not in (7, 8)]
    assert replay[7].event.is_internal
    after = await ev.read_events(
        db_pool, project_id=PROJECT, run_id=str(run["id"]), after_seq=8, include_internal=True
    )
    assert [p.event.type for p in after] == ["status_changed", "run_finished"]
