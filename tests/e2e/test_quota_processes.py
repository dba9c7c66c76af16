"""Two executor processes on one database sharing one model quota (issue 31): the stub in
quota mode stands for Gemini with a small key. Every run completes, no window of the quota
gets more than one grant past it, 429s stay rare, a second project is not stuck behind the
first one's backlog, and a replica killed while holding a grant frees the budget for the
other. Waits are on database conditions with deadlines, never sleeps."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from agentfleet.auth import TokenStore
from agentfleet.gemini_stub import GeminiStub, Reply, Script
from agentfleet.gemini_stub.quota import parse_quota
from agentfleet.postgres import db
from agentfleet.testing.database import DatabaseFactory
from agentfleet.testing.waiting import wait_for_query
from agentfleet.v1 import executor_pb2
from tests.e2e.conftest import Fleet, Project, start_fleet_processes

LIMIT, WINDOW_S = 16, 4  # the stub's quota: 4 calls a second
GRANT_S = 0.5
SLACK = 2  # one grant: 0.5 s at 4/s (declared at the stub's rate, 95% headroom)
HEAVY, LIGHT = "heavy-e2e", "light-e2e"
"""Projects with weights 3 and 1 (AGENTFLEET_MODEL_QUOTA_WEIGHTS of both executors)."""
SHARE_TOLERANCE = 0.1
"""Of the heavy project's share of the calls while both saturate (0.75 by weight): the
shared budget lets a project lead by one grant, and the first calls settle the shares."""


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def quota_fleet(
    database_factory: DatabaseFactory, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Fleet]:
    database_url = await database_factory.create_database()
    pool = await db.create_pool(database_url, min_size=1, max_size=10)
    stub = GeminiStub(record_requests=False, quota=parse_quota(f"rpm={LIMIT}/{WINDOW_S}s"))
    await stub.start()
    stub.add_script(Script(name="answer", policy=lambda request: Reply(text="done")))
    service = await TokenStore(pool).create(
        project_id=None, role="service", service="executor", name="e2e"
    )
    processes = await start_fleet_processes(
        database_url=database_url,
        log_dir=tmp_path_factory.mktemp("quota-fleet"),
        environ={
            "AGENTFLEET_AUTH": "on",
            "AGENTFLEET_SERVICE_TOKEN": service.token,
            "AGENTFLEET_GEMINI_BASE_URL": stub.base_url or "",
            "AGENTFLEET_SHUTDOWN_GRACE_S": "4",
            "AGENTFLEET_MODEL_QUOTAS": f"*:rpm={LIMIT * 60 // WINDOW_S}",
            "AGENTFLEET_MODEL_QUOTA_GRANT_S": str(GRANT_S),
            "AGENTFLEET_MODEL_QUOTA_WEIGHTS": f"{HEAVY}=3,{LIGHT}=1",
            # One attempt: a 429 the limiter does not absorb would fail the run.
            "AGENTFLEET_MODEL_MAX_ATTEMPTS": "1",
            "AGENTFLEET_EXECUTOR_LEASE_S": "3",
            "AGENTFLEET_EXECUTOR_HEARTBEAT_S": "1",
        },
    )
    running = Fleet(database_url=database_url, pool=pool, stub=stub, processes=processes)
    try:
        yield running
    finally:
        await running.close()
        await processes.stop(grace_s=10.0)
        await stub.stop()
        await pool.close()
        await database_factory.drop_database(database_url)


async def project_with_agent(fleet: Fleet, prefix: str, *, exact: bool = False) -> Project:
    project_id = prefix if exact else f"{prefix}-{uuid.uuid4().hex[:8]}"
    created = await TokenStore(fleet.pool).create(project_id=project_id, role="admin", name="e2e")
    project = Project(fleet=fleet, project_id=project_id, token=created.token)
    await project.define("worker", system_prompt="You answer.")
    return project


async def trigger(project: Project, count: int, executor: str) -> list[str]:
    api = project.executor(executor)
    runs = [
        await api.TriggerRun(
            executor_pb2.StartRunRequest(
                project_id=project.project_id, agent_name="worker", input="go"
            )
        )
        for _ in range(count)
    ]
    return [run.id for run in runs]


def quota_windows(fleet: Fleet) -> list[tuple[int, int]]:
    assert fleet.stub.quota is not None
    return [(w.accepted, w.refused) for w in fleet.stub.quota.windows()]


async def test_two_executors_live_within_one_quota_and_share_it_fairly(
    quota_fleet: Fleet,
) -> None:
    big = await project_with_agent(quota_fleet, "big")
    small = await project_with_agent(quota_fleet, "small")
    big_runs = await trigger(big, 20, "executor-a") + await trigger(big, 20, "executor-b")
    # The backlog is claimed and waiting for quota before the small project arrives.
    await wait_for_query(
        quota_fleet.pool,
        "SELECT count(*) >= 30 FROM kb.agent_runs WHERE project_id = $1 AND status = 'running'",
        big.project_id,
        timeout_s=30,
    )
    small_runs = await trigger(small, 2, "executor-a") + await trigger(small, 2, "executor-b")
    await wait_for_query(
        quota_fleet.pool,
        "SELECT count(*) = 4 FROM kb.agent_runs WHERE project_id = $1 AND status = 'completed'",
        small.project_id,
        timeout_s=30,
    )
    big_done_when_small_done = await quota_fleet.pool.fetchval(
        "SELECT count(*) FROM kb.agent_runs WHERE project_id = $1 AND status = 'completed'",
        big.project_id,
    )
    await wait_for_query(
        quota_fleet.pool,
        "SELECT count(*) = 40 FROM kb.agent_runs WHERE project_id = $1 AND status = 'completed'",
        big.project_id,
        timeout_s=60,
        what="every run of the backlog completes, none failed on a 429",
    )
    statuses = await quota_fleet.pool.fetch(
        "SELECT status, count(*) FROM kb.agent_runs WHERE id = ANY($1::uuid[]) GROUP BY status",
        big_runs + small_runs,
    )
    assert {r["status"]: r["count"] for r in statuses} == {"completed": 44}
    # The small project's runs went within a round of the backlog, not after it.
    assert big_done_when_small_done < 30
    windows = quota_windows(quota_fleet)
    assert max(accepted for accepted, _ in windows) <= LIMIT + SLACK
    refused = sum(r for _, r in windows)
    assert refused <= max(1, 0.02 * 44)


async def test_two_executors_split_a_saturated_quota_by_project_weight(
    quota_fleet: Fleet,
) -> None:
    heavy = await project_with_agent(quota_fleet, HEAVY, exact=True)
    light = await project_with_agent(quota_fleet, LIGHT, exact=True)
    runs: list[str] = []
    # Both projects' backlogs on both executors at once: at 3:1 the heavy project's 36
    # runs are done when the light one has done 12 of its 16, so both saturate throughout.
    for _ in range(4):
        runs += await trigger(heavy, 5, "executor-a") + await trigger(light, 2, "executor-a")
        runs += await trigger(heavy, 4, "executor-b") + await trigger(light, 2, "executor-b")
    await wait_for_query(
        quota_fleet.pool,
        "SELECT count(*) = 52 FROM kb.agent_runs WHERE id = ANY($1::uuid[])"
        " AND status = 'completed'",
        runs,
        timeout_s=90,
        what="every run of both projects completes",
    )
    order = [
        r["project_id"]
        for r in await quota_fleet.pool.fetch(
            "SELECT project_id FROM kb.agent_runs WHERE id = ANY($1::uuid[]) ORDER BY completed_at",
            runs,
        )
    ]
    # The first 4 settle the shares; the next 32 are served while both still wait.
    window = order[4:36]
    share = window.count(HEAVY) / len(window)
    assert abs(share - 0.75) <= SHARE_TOLERANCE, f"{HEAVY} got {share:.2f}: {window}"
    windows = quota_windows(quota_fleet)
    assert max(accepted for accepted, _ in windows) <= LIMIT + SLACK


async def test_a_killed_replica_frees_its_share_for_the_other(quota_fleet: Fleet) -> None:
    project = await project_with_agent(quota_fleet, "kill")
    before = sum(accepted for accepted, _ in quota_windows(quota_fleet))
    runs = await trigger(project, 12, "executor-a") + await trigger(project, 12, "executor-b")
    # Wait until executor-b has runs in flight, holding slots of the budget.
    await wait_for_query(
        quota_fleet.pool,
        "SELECT count(*) >= 4 FROM kb.agent_runs WHERE project_id = $1 AND status = 'running'",
        project.project_id,
        timeout_s=30,
    )
    quota_fleet.processes.processes["executor-b"].kill()
    await quota_fleet.processes.processes["executor-b"].wait()
    # executor-a recovers b's runs when their leases expire and, with the whole budget,
    # completes them all: b's unused grant only lapses, it is never counted again.
    await wait_for_query(
        quota_fleet.pool,
        "SELECT count(*) = 24 FROM kb.agent_runs WHERE id = ANY($1::uuid[])"
        " AND status = 'completed'",
        runs,
        timeout_s=90,
        what="every run completes on the surviving executor",
    )
    windows = quota_windows(quota_fleet)
    assert max(accepted for accepted, _ in windows) <= LIMIT + SLACK
    assert sum(accepted for accepted, _ in windows) - before >= 24
