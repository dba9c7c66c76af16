"""Fallback on the quota's expected wait, on real processes (issue 31): two executors share a
declared quota of one call a minute for the primary model, the stub enforces a quota per
model. A definition with a fallback whose primary would make its call wait past the
definition's bound sends the call to the fallback at once (recorded on the message, a
SAFETY model_fallback event naming the expected wait); one with no fallback waits, shown
on the run, and fails past the maximum wait with an error naming the model and the limit.
Every wait is on a condition with a deadline, none on a sleep."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from agentfleet.auth import TokenStore
from agentfleet.gemini_stub import GeminiStub, Reply, Script
from agentfleet.gemini_stub.quota import parse_quota
from agentfleet.postgres import db
from agentfleet.testing.database import DatabaseFactory
from agentfleet.v1 import common_pb2, executor_pb2, history_pb2, registry_pb2
from tests.e2e.conftest import Fleet, Project, start_fleet_processes

T = common_pb2.RunEventType
PRIMARY, FALLBACK = "gemini-e2e-pro", "gemini-e2e-flash"
MAX_WAIT_S = 6
"""The executors' maximum quota wait: far below the primary's one slot a minute."""


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def fallback_fleet(
    database_factory: DatabaseFactory, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Fleet]:
    database_url = await database_factory.create_database()
    pool = await db.create_pool(database_url, min_size=1, max_size=10)
    # Every model apart: 20 a minute, so the fallback's few calls are never refused.
    stub = GeminiStub(record_requests=True, quota=parse_quota("rpm=20/60s"))
    await stub.start()
    stub.add_script(Script(name="answer", policy=lambda request: Reply(text="done")))
    service = await TokenStore(pool).create(
        project_id=None, role="service", service="executor", name="e2e"
    )
    processes = await start_fleet_processes(
        database_url=database_url,
        log_dir=tmp_path_factory.mktemp("quota-fallback-fleet"),
        environ={
            "AGENTFLEET_AUTH": "on",
            "AGENTFLEET_SERVICE_TOKEN": service.token,
            "AGENTFLEET_GEMINI_BASE_URL": stub.base_url or "",
            "AGENTFLEET_SHUTDOWN_GRACE_S": "4",
            "AGENTFLEET_MODEL_QUOTAS": f"{PRIMARY}:rpm=1",
            "AGENTFLEET_MODEL_QUOTA_MAX_WAIT_S": str(MAX_WAIT_S),
            "AGENTFLEET_MODEL_MAX_ATTEMPTS": "1",
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


async def new_project(fleet: Fleet, prefix: str) -> Project:
    project_id = f"{prefix}-{uuid.uuid4().hex[:8]}"
    created = await TokenStore(fleet.pool).create(project_id=project_id, role="admin", name="e2e")
    return Project(fleet=fleet, project_id=project_id, token=created.token)


async def define(project: Project, name: str, **model: object) -> None:
    await project.registry().UpsertAgentDefinition(
        registry_pb2.UpsertAgentDefinitionRequest(
            project_id=project.project_id,
            agent_definition=common_pb2.AgentDefinition(
                name=name,
                system_prompt="You answer.",
                model=common_pb2.ModelConfig(name=PRIMARY, **model),
            ),
        )
    )


async def run_to_end(project: Project, agent: str, executor: str) -> list[common_pb2.RunEvent]:
    stream = project.executor(executor).StartRun(
        executor_pb2.StartRunRequest(project_id=project.project_id, agent_name=agent, input="go")
    )
    async with asyncio.timeout(60):
        return [event async for event in stream]


def fallbacks(events: list[common_pb2.RunEvent]) -> list[common_pb2.Safety]:
    return [
        e.safety
        for e in events
        if e.type == T.RUN_EVENT_TYPE_SAFETY
        and e.safety.kind == common_pb2.SAFETY_KIND_MODEL_FALLBACK
    ]


async def test_a_primary_whose_quota_wait_passes_the_bound_hands_calls_to_the_fallback(
    fallback_fleet: Fleet,
) -> None:
    project = await new_project(fallback_fleet, "switch")
    await define(project, "switching", fallback_models=[FALLBACK], fallback_wait_s=2)
    # Runs on both replicas at once: one call of the primary a minute between them.
    runs = await asyncio.gather(
        *(run_to_end(project, "switching", f"executor-{side}") for side in "abab")
    )
    assert [r[-1].run_finished.run.status for r in runs] == [common_pb2.RUN_STATUS_COMPLETED] * 4
    answered: list[str] = []
    for events in runs:
        messages = await project.history("history-b").ListRunMessages(
            history_pb2.ListRunMessagesRequest(
                project_id=project.project_id, run_id=events[0].run_id
            )
        )
        models = [
            m.model_name for m in messages.messages if m.role == common_pb2.MESSAGE_ROLE_MODEL
        ]
        assert len(models) == 1
        answered += models
        switched = fallbacks(events)
        if models == [FALLBACK]:
            (event,) = switched
            assert event.details["model"] == FALLBACK
            assert f"{PRIMARY}: 429 model quota: {PRIMARY} (requests_per_minute)" in event.message
            assert "past the 2 s this call waits before its fallback model" in event.message
        else:
            assert not switched
    # At most one primary call fits the minute (none when an earlier test took it); every
    # other call went to the fallback without waiting for the primary's next slot.
    assert answered.count(PRIMARY) <= 1
    assert answered.count(FALLBACK) >= 3
    sent = [r.model for r in fallback_fleet.stub.requests]
    assert sent.count(PRIMARY) == answered.count(PRIMARY)
    assert fallback_fleet.stub.quota is not None
    assert sum(w.refused for w in fallback_fleet.stub.quota.windows()) == 0


async def test_without_its_own_bound_a_fallback_is_used_when_the_wait_passes_the_maximum(
    fallback_fleet: Fleet,
) -> None:
    project = await new_project(fallback_fleet, "maxwait")
    await define(project, "switching", fallback_models=[FALLBACK])
    first, second = await asyncio.gather(
        run_to_end(project, "switching", "executor-a"),
        run_to_end(project, "switching", "executor-b"),
    )
    for events in (first, second):
        assert events[-1].run_finished.run.status == common_pb2.RUN_STATUS_COMPLETED
    # The primary's next slot is a minute off, past the 6 s maximum: at least one switched
    # (both, once the first test took this minute's slot), without waiting the maximum.
    switched = fallbacks(first) + fallbacks(second)
    assert switched
    assert all(f"past the {MAX_WAIT_S} s this call waits" in s.message for s in switched)


async def test_with_no_fallback_a_call_waits_shown_and_fails_past_the_maximum_wait(
    fallback_fleet: Fleet,
) -> None:
    project = await new_project(fallback_fleet, "nofallback")
    await define(project, "alone")
    sent_before = len(fallback_fleet.stub.requests)
    runs = await asyncio.gather(
        run_to_end(project, "alone", "executor-a"), run_to_end(project, "alone", "executor-b")
    )
    failed = [r for r in runs if r[-1].run_finished.run.status == common_pb2.RUN_STATUS_FAILED]
    assert failed, "a call waiting past the maximum did not fail"
    for events in failed:
        run = events[-1].run_finished.run
        assert PRIMARY in run.error_message
        assert "requests_per_minute" in run.error_message
        assert "AGENTFLEET_MODEL_QUOTA_MAX_WAIT_S" in run.error_message
        waits = [e.model_quota_wait for e in events if e.type == T.RUN_EVENT_TYPE_MODEL_QUOTA_WAIT]
        # It waited (shown on the run), it did not go anywhere else.
        assert [w.waiting for w in waits] == [True, False]
        assert waits[0].model == PRIMARY
        # It waited out the maximum, or failed sooner once a refused grant said the quota
        # frees past it (the budget row is the model's, shared with the module's other
        # tests: how far ahead they left the timeline decides which).
        waited = waits[1].waited.ToTimedelta().total_seconds()
        assert waited >= MAX_WAIT_S - 1 or (
            f"past the maximum wait of {MAX_WAIT_S} s" in run.error_message
        ), (waited, run.error_message)
        assert not fallbacks(events)
    sent = [r.model for r in fallback_fleet.stub.requests[sent_before:]]
    assert FALLBACK not in sent
    assert len(sent) == len(runs) - len(failed)
