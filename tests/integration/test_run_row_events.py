"""A run's enqueue and its end each write the run row and its event in one statement (issue
#36): RUN_QUEUED and RUN_FINISHED hold the row as it was written, and every read shows that
row as the snapshot the executor used to build itself, the same AgentRun, also after the row
has moved on. Runs' ends ready at the same time share a transaction (group commit)."""

from __future__ import annotations

import asyncio

import asyncpg

from agentfleet import events as ev
from agentfleet.events.proto import RUN_ROW_TIMES
from agentfleet.testing import factories as f
from services.executor.queue import RunQueue
from services.executor.runs import RunRecord, StartRunParams
from services.executor.store.group_commit import GroupCommit
from services.executor.store.persistence import RunRecorder
from tests.integration.test_step_writes import OWNER, PROJECT

RUNS = 12


async def _leased(pool: asyncpg.Pool, group: GroupCommit | None = None) -> RunRecorder:
    row = await f.insert_leased_run(
        pool, owner=OWNER, project_id=PROJECT, agent_name="ender", labels={"team": "a"}
    )
    await pool.execute(
        "UPDATE kb.agent_runs SET timeout = interval '90.5 seconds', max_steps = 7,"
        ' trigger_origin = \'{"kind": "event", "n": 3}\' WHERE id = $1',
        row["id"],
    )
    run = RunRecord.from_row(
        await pool.fetchrow("SELECT * FROM kb.agent_runs WHERE id = $1", row["id"])
    )
    return RunRecorder(pool, run, owner=OWNER, next_message_seq=1, group=group)


async def _row_now(pool: asyncpg.Pool, run_id: str) -> asyncpg.Record:
    return await pool.fetchrow(
        f"SELECT r.*, {ev.ANSWERED_MODEL} FROM kb.agent_runs r WHERE id = $1::uuid", run_id
    )


async def _finished_event(pool: asyncpg.Pool, run_id: str) -> ev.RunFinished:
    replay = await ev.read_events(pool, project_id=PROJECT, run_id=run_id, after_seq=0)
    finished = [p.event for p in replay if isinstance(p.event, ev.RunFinished)]
    assert len(finished) == 1, replay
    return finished[0]


async def test_the_end_stores_the_row_and_a_replay_shows_it_as_the_snapshot(
    db_pool: asyncpg.Pool,
) -> None:
    recorder = await _leased(db_pool)
    output = {"score": 73, "weights": [1, 0.5], "note": None}

    finished = await recorder.record_finish(
        status="completed", reason="answered", summary="done", output=output
    )

    assert finished is not None
    assert finished.status == "completed"
    assert finished.output == output
    assert finished.lease_owner is None
    stored = await db_pool.fetchval(
        "SELECT payload FROM kb.agent_run_events WHERE run_id = $1::uuid AND type = $2",
        recorder.run.id,
        "run_finished",
    )
    assert set(stored) == {"run_row"}
    # Its nulls are left out, at the top level only: the answer keeps its own.
    assert "lease_owner" not in stored["run_row"]
    assert stored["run_row"]["output"] == output
    row = await _row_now(db_pool, recorder.run.id)
    assert (await _finished_event(db_pool, recorder.run.id)).run == ev.run_snapshot(row)
    snapshot = ev.run_snapshot(row)
    assert snapshot["timeout"] == "90.500s"
    assert snapshot["complete_time"]
    assert snapshot["labels"] == {"team": "a"}
    assert snapshot["max_steps"] == 7


async def test_a_replay_shows_the_run_as_it_ended_not_as_it_is_now(
    db_pool: asyncpg.Pool,
) -> None:
    recorder = await _leased(db_pool)
    await recorder.record_finish(status="paused", reason="paused by user", summary="so far")
    at_end = ev.run_snapshot(await _row_now(db_pool, recorder.run.id))

    await db_pool.execute(
        "UPDATE kb.agent_runs SET status = 'running', summary = NULL, completed_at = NULL,"
        " resume_count = resume_count + 1 WHERE id = $1::uuid",
        recorder.run.id,
    )

    assert (await _finished_event(db_pool, recorder.run.id)).run == at_end


async def test_a_run_that_moved_on_is_not_ended_and_nothing_is_written(
    db_pool: asyncpg.Pool,
) -> None:
    recorder = await _leased(db_pool)
    await db_pool.execute(
        "UPDATE kb.agent_runs SET status = 'cancelled', completed_at = now() WHERE id = $1::uuid",
        recorder.run.id,
    )

    assert await recorder.record_finish(status="completed", reason="answered") is None

    count = await db_pool.fetchval(
        "SELECT count(*) FROM kb.agent_run_events WHERE run_id = $1::uuid", recorder.run.id
    )
    assert count == 0
    assert (
        await db_pool.fetchval(
            "SELECT last_event_seq FROM kb.agent_runs WHERE id = $1::uuid", recorder.run.id
        )
        == 0
    )


async def test_ends_ready_together_share_one_transaction(db_pool: asyncpg.Pool) -> None:
    group = GroupCommit(db_pool)
    recorders = [await _leased(db_pool, group) for _ in range(RUNS)]

    ended = await asyncio.gather(
        *(r.record_finish(status="completed", reason="answered") for r in recorders)
    )

    assert all(run is not None and run.status == "completed" for run in ended)
    assert group.groups >= 1
    assert group.grouped_writes >= RUNS // 2
    for recorder in recorders:
        replay = await ev.read_events(
            db_pool, project_id=PROJECT, run_id=recorder.run.id, after_seq=0
        )
        # Never started (no record_start): its claim is shown first.
        assert [type(p.event) for p in replay] == [ev.StatusChanged] * 2 + [ev.RunFinished]
        assert [p.seq for p in replay] == [1, 2, 3]
        assert replay[2].event.run["id"] == recorder.run.id


async def test_every_timestamp_column_of_a_run_is_read_back_as_a_time(
    db_pool: asyncpg.Pool,
) -> None:
    """The stored row's times are text; a new timestamp column must be listed to be read."""
    columns = await db_pool.fetch(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = 'kb'"
        " AND table_name = 'agent_runs' AND data_type = 'timestamp with time zone'"
    )
    assert sorted(c["column_name"] for c in columns) == sorted(RUN_ROW_TIMES)


async def test_an_enqueue_stores_the_row_it_inserted_as_its_run_queued(
    db_pool: asyncpg.Pool,
) -> None:
    run, created = await RunQueue(db_pool).enqueue(
        StartRunParams(
            project_id=PROJECT,
            agent_name="queued",
            agent_definition_id=None,
            input="later",
            labels={"k": "v"},
            timeout_s=12.25,
            max_steps=3,
        )
    )

    assert created
    stored = await db_pool.fetch(
        "SELECT seq, type, payload FROM kb.agent_run_events WHERE run_id = $1::uuid", run.id
    )
    assert [(r["seq"], r["type"]) for r in stored] == [(1, "run_queued")]
    assert set(stored[0]["payload"]) == {"run_row"}
    assert (
        await db_pool.fetchval(
            "SELECT last_event_seq FROM kb.agent_runs WHERE id = $1::uuid", run.id
        )
        == 1
    )
    replay = await ev.read_events(db_pool, project_id=PROJECT, run_id=run.id, after_seq=0)
    assert [type(p.event) for p in replay] == [ev.RunQueued]
    assert replay[0].event.run == run.snapshot()
    assert replay[0].event.run["timeout"] == "12.250s"
