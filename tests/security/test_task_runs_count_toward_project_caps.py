"""Runs of a task an agent created count toward the per-project run caps (review finding).

A run queued for a SpecTask that ``create_subtasks`` wrote is placed under the task's
creator (task_lineage.inherit_task_limits), so it has a parent. Counted as a child, it was
exempt from AGENTFLEET_MAX_QUEUED_PER_PROJECT and AGENTFLEET_MAX_RUNNING_PER_PROJECT, and a
member calling TriggerRun with that task_id and fresh request_ids got 23 of 23 runs in past
a queued cap of 3, all running past a running cap of 1. One such task is all it takes (any
planner agent with config.subtask_agents writes one); its creator only has to exist.

Such runs now count like top-level runs: past the queued cap TriggerRun answers
RESOURCE_EXHAUSTED, and at the running cap they stay queued. Children a parent starts itself
stay exempt (tests/integration/test_run_queue.py).
"""

from __future__ import annotations

import asyncio

import asyncpg
import grpc
import pytest

from agentfleet.v1 import common_pb2, executor_pb2
from services.executor.queue import RunQueue
from services.executor.registry.definitions import AgentDefinition, DefinitionRepository
from tests.security.test_executor_admission import (
    OTHER,
    PROJECT,
    QUEUED_CAP,
    TENANT_CALLERS,
    Deployment,
    _plant_running_run,
    deployment,
)

__all__ = ["deployment"]

RUNNING_CAP = 1  # the deployment's AGENTFLEET_MAX_RUNNING_PER_PROJECT


async def _task_of_a_finished_planner(pool: asyncpg.Pool) -> str:
    """A task as create_subtasks writes it, whose creator ended long ago."""
    creator = await pool.fetchval(
        "INSERT INTO kb.agent_runs (project_id, agent_name, status, depth, started_at,"
        " completed_at) VALUES ($1, 'planner', 'completed', 0, now(), now()) RETURNING id::text",
        PROJECT,
    )
    return await pool.fetchval(
        "INSERT INTO kb.graph_objects (project_id, type, properties) VALUES ($1, 'SpecTask', $2)"
        " RETURNING id::text",
        PROJECT,
        {
            "title": "sub",
            "status": "completed",
            "created_by_run_id": creator,
            "allowed_agents": ["worker"],
        },
    )


@pytest.mark.parametrize("caller", TENANT_CALLERS)
async def test_runs_of_an_agents_task_are_capped_like_top_level_runs(
    deployment: Deployment, caller: str
) -> None:
    pool = deployment.stack.pool
    await DefinitionRepository(pool).upsert(
        PROJECT, AgentDefinition(name="worker", system_prompt="w")
    )
    await _plant_running_run(pool, PROJECT)  # the project is at its running cap
    task_id = await _task_of_a_finished_planner(pool)
    executor = deployment.executor(caller)

    # Concurrent triggers: the per-project lock covers these runs too, so exactly the cap.
    attempts = QUEUED_CAP + 20
    outcomes = await asyncio.gather(
        *(
            executor.TriggerRun(
                executor_pb2.StartRunRequest(
                    project_id=PROJECT,
                    agent_name="worker",
                    input="work",
                    task_id=task_id,
                    request_id=f"flood-{i}",
                )
            )
            for i in range(attempts)
        ),
        return_exceptions=True,
    )
    accepted = [o for o in outcomes if isinstance(o, common_pb2.AgentRun)]
    refused = [o for o in outcomes if isinstance(o, grpc.aio.AioRpcError)]
    assert len(accepted) == QUEUED_CAP
    assert len(refused) == attempts - QUEUED_CAP
    for error in refused:
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "AGENTFLEET_MAX_QUEUED_PER_PROJECT" in (error.details() or "")
    # Still placed under their creator, with its limits: only the caps changed.
    assert all(run.parent_run_id and run.depth == 1 for run in accepted)

    # The running cap: a claim, as every worker makes it, takes none of them, so none runs
    # (were any claimable, this claim or the deployment's workers would have taken it).
    probe = RunQueue(pool, max_running_per_project=RUNNING_CAP)
    assert await probe.claim_next("probe", 30.0, limit=attempts) == []
    statuses = await pool.fetch(
        "SELECT status FROM kb.agent_runs WHERE id = ANY($1::uuid[])",
        [run.id for run in accepted],
    )
    assert [row["status"] for row in statuses] == ["queued"] * QUEUED_CAP


@pytest.mark.parametrize("caller", TENANT_CALLERS)
async def test_a_task_of_another_project_is_not_found_and_nothing_is_queued(
    deployment: Deployment, caller: str
) -> None:
    """task_id is only a foreign key to graph objects: a caller naming another project's
    task (to run under its creator, with its limits) is told the task does not exist."""
    pool = deployment.stack.pool
    await DefinitionRepository(pool).upsert(
        PROJECT, AgentDefinition(name="worker", system_prompt="w")
    )
    foreign_task = await pool.fetchval(
        "INSERT INTO kb.graph_objects (project_id, type, properties) VALUES ($1, 'SpecTask', $2)"
        " RETURNING id::text",
        OTHER,
        {"title": "theirs", "status": "ready"},
    )
    before = await pool.fetchval("SELECT count(*) FROM kb.agent_runs")

    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await deployment.executor(caller).TriggerRun(
            executor_pb2.StartRunRequest(
                project_id=PROJECT, agent_name="worker", input="work", task_id=foreign_task
            )
        )

    assert refused.value.code() == grpc.StatusCode.NOT_FOUND
    assert f"task {foreign_task} not found" in (refused.value.details() or "")
    assert await pool.fetchval("SELECT count(*) FROM kb.agent_runs") == before
