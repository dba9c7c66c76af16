"""Group commit on a real PostgreSQL (issue #36): concurrent runs' step writes of one
statement share one transaction, a lone run's write goes alone, and one write's failure
(a statement error, a lost lease) is that write's only."""

from __future__ import annotations

import asyncio

import asyncpg

from agentfleet.testing import factories as f
from services.executor.runs import RunRecord
from services.executor.store.group_commit import GroupCommit
from services.executor.store.persistence import LeaseLost, RunRecorder
from tests.integration.test_step_writes import OWNER, _done, _reply, _running_run

RUNS = 20


async def _recorders(pool: asyncpg.Pool, group: GroupCommit, n: int) -> list[RunRecorder]:
    recorders = []
    for _ in range(n):
        run = await _running_run(pool)
        recorders.append(RunRecorder(pool, run, owner=OWNER, next_message_seq=1, group=group))
    return recorders


async def _event_times(pool: asyncpg.Pool, run: RunRecord) -> list[tuple[int, object]]:
    rows = await pool.fetch(
        "SELECT seq, created_at FROM kb.agent_run_events WHERE run_id = $1::uuid ORDER BY seq",
        run.id,
    )
    return [(r["seq"], r["created_at"]) for r in rows]


async def test_writes_ready_together_share_one_transaction(db_pool: asyncpg.Pool) -> None:
    group = GroupCommit(db_pool)
    recorders = await _recorders(db_pool, group, RUNS)
    steps = [_reply(1, calls=2) for _ in recorders]
    await asyncio.gather(
        *(
            r.record_model_reply(step=1, reply=reply, calls=planned)
            for r, (reply, planned) in zip(recorders, steps, strict=True)
        )
    )
    # The first write went alone; the others waited for it and went together.
    assert group.groups >= 1
    assert group.grouped_writes >= RUNS // 2
    times = set()
    for recorder in recorders:
        stored = await _event_times(db_pool, recorder.run)
        assert [seq for seq, _ in stored] == [1, 2, 3]  # MODEL_TEXT, two TOOL_REQUESTs
        times.add(stored[0][1])
    # One transaction's now() is shared by every row it wrote: the grouped runs' events
    # carry one time, the lone first write's another.
    assert len(times) <= RUNS - group.grouped_writes + group.groups
    await asyncio.gather(
        *(
            r.record_tool_results(step=1, results=_done(planned))
            for r, (_, planned) in zip(recorders, steps, strict=True)
        )
    )
    for recorder in recorders:
        statuses = await db_pool.fetch(
            "SELECT status FROM kb.agent_run_tool_calls WHERE run_id = $1::uuid", recorder.run.id
        )
        assert [s["status"] for s in statuses] == ["completed", "completed"]
        assert [seq for seq, _ in await _event_times(db_pool, recorder.run)] == [1, 2, 3, 4, 5]


async def test_a_lone_run_writes_alone(db_pool: asyncpg.Pool) -> None:
    group = GroupCommit(db_pool)
    (recorder,) = await _recorders(db_pool, group, 1)
    for step in range(1, 4):
        reply, planned = _reply(step, calls=1)
        await recorder.record_model_reply(step=step, reply=reply, calls=planned)
        await recorder.record_tool_results(step=step, results=_done(planned))
    assert group.groups == 0
    assert len(await _event_times(db_pool, recorder.run)) == 9  # MODEL_TEXT, request, response


async def test_a_failing_write_fails_alone_and_the_others_commit(db_pool: asyncpg.Pool) -> None:
    group = GroupCommit(db_pool)
    leader, *others = await _recorders(db_pool, group, 8)
    broken, lost = others[2], others[5]
    # broken's message 1 exists already: its insert violates the unique (run_id, seq).
    await f.insert_message(db_pool, run=broken.run.as_mapping(), seq=1)
    await db_pool.execute(
        "UPDATE kb.agent_runs SET lease_owner = 'worker-2' WHERE id = $1::uuid", lost.run.id
    )
    first = asyncio.create_task(leader.record_model_reply(step=1, reply=_reply(1, 1)[0], calls=[]))
    await asyncio.sleep(0)
    outcomes = await asyncio.gather(
        *(r.record_model_reply(step=1, reply=_reply(1, 1)[0], calls=[]) for r in others),
        return_exceptions=True,
    )
    await first
    assert isinstance(outcomes[2], asyncpg.UniqueViolationError)
    assert isinstance(outcomes[5], LeaseLost)
    for recorder, outcome in zip(others, outcomes, strict=True):
        stored = await _event_times(db_pool, recorder.run)
        if recorder in (broken, lost):
            assert stored == []
        else:
            assert not isinstance(outcome, BaseException), outcome
            assert [seq for seq, _ in stored] == [1]  # MODEL_TEXT
    assert [seq for seq, _ in await _event_times(db_pool, leader.run)] == [1]


async def test_grouping_switched_off_sends_every_write_alone(db_pool: asyncpg.Pool) -> None:
    group = GroupCommit(db_pool, enabled=False)
    recorders = await _recorders(db_pool, group, 6)
    await asyncio.gather(
        *(r.record_model_reply(step=1, reply=_reply(1, 1)[0], calls=[]) for r in recorders)
    )
    assert group.groups == 0
    times = {(await _event_times(db_pool, r.run))[0][1] for r in recorders}
    assert len(times) == len(recorders)
