"""create_subtasks that blocks an existing, available task takes back its ``ready`` hint, as
AddTasks does for a new edge.

The claim re-checks blockers in its own statement, so a claim that starts after the tool
commits never takes the task. One already under way when the tool commits reads with a
snapshot taken before the new edge, and when it locks the task it re-checks only a row
that changed since (READ COMMITTED). The tool only locked the task FOR SHARE, so the claim
found it unchanged and started it with its new blocker still pending (5 runs of 5 before
this fix, the claim slowed by 300,000 tasks in progress elsewhere; 0 of 5 after). With the
hint cleared the changed row fails the claim's ``ready`` test. No hook lets a test pause a
claim between its snapshot and its lock, so this test shows the stale hint itself (and the
dispatcher load KEDA scales on, which counted the blocked task as work) and the claim
through the task's new blocker and back. Real PostgreSQL, the real tool and claim.
"""

from __future__ import annotations

import uuid

import asyncpg

from agentfleet.queue_depth import DISPATCHER_LOAD_SQL
from services.dispatcher.store import claims, transitions
from services.dispatcher.store.claims import Claimed
from services.toolpool.builtin import ToolContext, call_builtin
from tests.integration.one_task_graph import new_graph
from tests.integration.test_builtin_tools import agent_run

P = "subtasks-ready"


async def claim(pool: asyncpg.Pool) -> list[Claimed]:
    """One dispatcher round: hints for new tasks, then the claim."""
    async with pool.acquire() as conn:
        await claims.classify_new(conn)
        return await claims.claim_available(conn, owner="d", lease_s=60.0, limit=8)


async def task_state(pool: asyncpg.Pool, task_id: str) -> tuple[str, bool]:
    row = await pool.fetchrow(
        "SELECT status, (properties ->> 'ready') = 'true' AS ready FROM kb.graph_objects "
        "WHERE project_id = $1 AND id = $2::uuid",
        P,
        task_id,
    )
    assert row is not None
    return row["status"], row["ready"]


async def test_a_task_blocked_by_new_subtasks_is_no_longer_ready(db_pool: asyncpg.Pool) -> None:
    graph_id, ids = await new_graph(db_pool, P, ["t"])
    task_id = ids["t"]
    assert await task_state(db_pool, task_id) == ("pending", True)
    run_id = await agent_run(db_pool, P, config={"subtask_agents": ["*"]})
    ctx = ToolContext(project_id=P, run_id=run_id, pool=db_pool)

    added = await call_builtin(
        ctx,
        "create_subtasks",
        {"tasks": [{"key": "s", "title": "s", "blocks": [task_id]}], "graph_id": graph_id},
    )

    assert await task_state(db_pool, task_id) == ("pending", False)
    (first,) = await claim(db_pool)
    assert first.task.properties["key"] == "s"
    # Dispatcher load: s in progress; t, waiting on it, is no work yet.
    assert await db_pool.fetchval(DISPATCHER_LOAD_SQL) == 1

    # s completes: t is ready again and the next claim starts it.
    async with db_pool.acquire() as conn:
        completion = await transitions.complete(
            conn,
            transitions.Attempt(
                project_id=P,
                task_id=added["tasks"][0]["id"],
                graph_id=graph_id,
                session_id=first.session_id,
                run_id=str(uuid.uuid4()),
            ),
            summary="s done",
        )
    assert completion.done
    assert await task_state(db_pool, task_id) == ("pending", True)
    assert [c.task.id for c in await claim(db_pool)] == [task_id]
