"""The run claim is fair per project (issue #15): one project's backlog never hides another
project's queued runs, whoever queued them. Asserted on the claim's choices (which runs each
batch takes), on a real database, with the claim statement the executor workers run."""

from __future__ import annotations

import asyncpg

from services.executor.queue import RunQueue
from services.executor.runs import StartRunParams


async def test_one_projects_backlog_does_not_hide_another_projects_run(
    db_pool: asyncpg.Pool,
) -> None:
    """Project A has 3,000 queued runs, all older than project B's one; an executor with
    two free slots claims B's run in its first batch, next to A's oldest."""
    await db_pool.execute(
        """
        INSERT INTO kb.agent_runs (project_id, agent_name, created_at)
        SELECT 'flooder', 'helper', now() - make_interval(secs => 10000 - i)
        FROM generate_series(1, 3000) AS i
        """
    )
    await db_pool.execute("ANALYZE kb.agent_runs")
    queue = RunQueue(db_pool)
    quiet, _ = await queue.enqueue(
        StartRunParams(project_id="quiet", agent_name="helper", agent_definition_id=None, input="q")
    )
    oldest_flood = await db_pool.fetchval(
        "SELECT id::text FROM kb.agent_runs WHERE project_id = 'flooder'"
        " ORDER BY created_at, id LIMIT 1"
    )

    first_batch = await queue.claim("worker", 30.0, limit=2)

    assert {c.run.id for c in first_batch} == {quiet.id, oldest_flood}
    # Once B's queue is empty, A's backlog goes on in order, one batch after another.
    second_batch = await queue.claim("worker", 30.0, limit=2)
    assert all(c.run.project_id == "flooder" for c in second_batch)
    assert len(second_batch) == 2


async def test_round_robin_across_projects_respects_the_running_cap(
    db_pool: asyncpg.Pool,
) -> None:
    """Three projects with backlogs: each claim batch goes round the projects (oldest
    first within each), and a project at its running cap offers only its children."""
    await db_pool.execute(
        """
        INSERT INTO kb.agent_runs (project_id, agent_name, created_at)
        SELECT p, 'helper', now() - make_interval(secs => 1000 - i)
        FROM generate_series(1, 200) AS i, unnest(ARRAY['p1', 'p2', 'p3']) AS p
        """
    )
    queue = RunQueue(db_pool, max_running_per_project=2)
    batch = [c.run for c in await queue.claim("w", 30.0, limit=3)]
    assert sorted(run.project_id for run in batch) == ["p1", "p2", "p3"]
    batch = [c.run for c in await queue.claim("w", 30.0, limit=6)]
    assert sorted(run.project_id for run in batch) == ["p1", "p2", "p3"]  # caps reached
    assert await queue.claim("w", 30.0, limit=6) == []
    parent = batch[0]
    child, _ = await queue.enqueue(
        StartRunParams(
            project_id=parent.project_id,
            agent_name="helper",
            agent_definition_id=None,
            input="c",
            parent_run_id=parent.id,
            root_run_id=parent.id,
            depth=1,
        )
    )
    (claimed_child,) = await queue.claim("w", 30.0, limit=6)
    assert claimed_child.run.id == child.id
