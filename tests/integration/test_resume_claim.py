"""ResumeRun right after a run paused, on the worker whose execution paused it: that
execution is still winding down (cancelling descendants, its last writes) when the resume's
claim takes the run. The claim is a new execution, queued behind the old one -- never taken
for "our own lease renewed after an outage" and dropped, which left the run ``running``
with nobody executing it until its lease expired.

Real gRPC (ResumeRun and CancelRun on an API-only executor), real PostgreSQL, the stub
Gemini server; the worker runs in the test, its agent loop held after the pause so the
interleaving happens every time."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import grpc
import pytest

from agentfleet import events
from agentfleet.gemini_stub import Call, GeminiStub, Reply, Script
from agentfleet.gemini_stub.request import StubRequest
from agentfleet.postgres.db import Listener
from agentfleet.process.service_runtime import (
    RunningService,
    ServiceContext,
    ServiceParts,
    start_service,
)
from agentfleet.rpc.grpc_server import Registration
from agentfleet.testing.gemini import model_client_for
from agentfleet.testing.services import test_settings as make_settings
from agentfleet.testing.waiting import wait_for, wait_for_query
from agentfleet.v1 import common_pb2, executor_pb2, executor_pb2_grpc
from services.executor.queue import RESUME_LEASE_OWNER, RunQueue
from services.executor.registry.definitions import AgentDefinition, DefinitionRepository
from services.executor.registry.model_config import ModelConfig
from services.executor.run_path.loop import AgentLoop, RunControl
from services.executor.run_server import build_executor_parts
from services.executor.runs import RunRecord
from services.executor.tools.tool_gateway import InMemoryToolGateway
from services.executor.worker import RunWorker

PROJECT = "proj"
OWNER = "resume-worker"
STREAM_DEADLINE_S = 20.0
"""Far below the worker's lease (LEASE_S): a resume left to lease expiry cannot make it."""
LEASE_S = 600.0


async def _add(args: dict[str, Any]) -> dict[str, Any]:
    return {"sum": args.get("a", 0) + args.get("b", 0)}


def tireless(request: StubRequest) -> Reply:
    """Always calls a tool while it has any; asked to wrap up (no tools), it summarizes."""
    if request.tool_names:
        return Reply(text=f"working {request.turn}", calls=[Call("add", {"a": request.turn})])
    return Reply(text=f"summary after {request.turn} turns")


@dataclass(kw_only=True, slots=True)
class HeldAfterPause:
    """The agent loop, with a hold point: the first execution that ends ``paused`` waits
    for :attr:`release` before returning to the worker, which still counts it as active
    -- the window in which ResumeRun's claim used to be dropped."""

    loop: AgentLoop
    held: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    executions: list[bool] = field(default_factory=list)
    """``control.resumed`` of each execution begun."""

    async def execute(self, run: RunRecord, control: RunControl) -> RunRecord | None:
        self.executions.append(control.resumed)
        finished = await self.loop.execute(run, control)
        if finished is not None and finished.status == "paused" and not self.held.is_set():
            self.held.set()
            await self.release.wait()
        return finished


@dataclass(kw_only=True, slots=True)
class Fleet:
    api: executor_pb2_grpc.ExecutorServiceStub
    executor: HeldAfterPause
    worker: RunWorker
    stopping: asyncio.Event
    worker_loop: asyncio.Task[None]


@pytest.fixture
async def fleet(
    database_url: str, db_pool: asyncpg.Pool, gemini_stub: GeminiStub
) -> AsyncIterator[Fleet]:
    await DefinitionRepository(db_pool).upsert(
        PROJECT,
        AgentDefinition(
            name="agent", system_prompt="You work.", model=ModelConfig(name="m"), tools=["add"]
        ),
    )
    gemini_stub.add_script(Script(name="agent", policy=tireless))
    settings = make_settings(
        DATABASE_URL=database_url,
        AGENTFLEET_AUTH="off",
        AGENTFLEET_GEMINI_BASE_URL=gemini_stub.base_url or "",
        AGENTFLEET_TOOLPOOL_ADDR="127.0.0.1:1",  # the API executor runs no run
    )

    async def api_only(context: ServiceContext) -> ServiceParts:
        servicer, _loops, on_stop = await build_executor_parts(context)
        registration = Registration.of(executor_pb2, executor_pb2_grpc, "ExecutorService", servicer)
        return ServiceParts(registrations=[registration], on_stop=on_stop)

    service: RunningService = await start_service(
        "executor", api_only, settings=settings, pool=db_pool, database_url=database_url, port=0
    )
    model = model_client_for(gemini_stub)
    executor = HeldAfterPause(
        loop=AgentLoop(
            pool=db_pool,
            definitions=DefinitionRepository(db_pool),
            tools=InMemoryToolGateway(tools={"add": _add}),
            model=model,
            owner=OWNER,
        )
    )
    stopping = asyncio.Event()
    try:
        async with (
            Listener(database_url) as listener,
            grpc.aio.insecure_channel(f"127.0.0.1:{service.port}") as channel,
        ):
            worker = RunWorker(
                queue=RunQueue(db_pool),
                executor=executor,
                listener=listener,
                owner=OWNER,
                lease_s=LEASE_S,
                heartbeat_s=0.5,
                poll_s=0.1,
                drain_s=5.0,
            )
            worker_loop = asyncio.create_task(worker.run(stopping))
            try:
                yield Fleet(
                    api=executor_pb2_grpc.ExecutorServiceStub(channel),
                    executor=executor,
                    worker=worker,
                    stopping=stopping,
                    worker_loop=worker_loop,
                )
            finally:
                executor.release.set()
                stopping.set()
                await asyncio.wait_for(worker_loop, 15)
    finally:
        await model.aclose()
        await service.stop(grace_s=1.0)


async def _paused_and_held(fleet: Fleet) -> str:
    """A run the worker paused at max_steps=1, its execution held before it returns."""
    run = await fleet.api.TriggerRun(
        executor_pb2.StartRunRequest(
            project_id=PROJECT, agent_name="agent", input="go", max_steps=1
        )
    )
    async with asyncio.timeout(STREAM_DEADLINE_S):
        await fleet.executor.held.wait()
    return run.id


async def _resume_claimed_behind(fleet: Fleet, pool: asyncpg.Pool, run_id: str) -> asyncio.Task:
    """ResumeRun streamed in a task, once the worker's claim took the resumed run while the
    execution that paused it is still active."""
    request = executor_pb2.ResumeRunRequest(
        project_id=PROJECT,
        run_id=run_id,
        input="more",
        max_steps=1,
        request_id=str(uuid.uuid4()),
    )
    stream = asyncio.create_task(_collect(fleet.api.ResumeRun(request)))
    await wait_for_query(
        pool,
        "SELECT lease_owner = $2 AND resume_count = 1 FROM kb.agent_runs WHERE id = $1::uuid",
        run_id,
        OWNER,
        what="the worker to claim the resumed run",
    )
    assert run_id in fleet.worker.active_run_ids  # the paused execution is still winding down
    return stream


def _control(fleet: Fleet, run_id: str) -> RunControl:
    control = fleet.worker.control(run_id)
    assert control is not None
    return control


async def _collect(stream: Any) -> list[common_pb2.RunEvent]:
    return [e async for e in stream]


async def test_a_resume_claimed_while_the_paused_execution_winds_down_is_executed(
    fleet: Fleet, db_pool: asyncpg.Pool
) -> None:
    run_id = await _paused_and_held(fleet)
    stream = await _resume_claimed_behind(fleet, db_pool, run_id)
    # Not begun while the old execution is active: two executions of one run never overlap.
    assert fleet.executor.executions == [False]

    fleet.executor.release.set()
    async with asyncio.timeout(STREAM_DEADLINE_S):
        resumed = await stream
    final = resumed[-1].run_finished.run
    assert (final.status, final.resume_count, final.total_steps) == (
        common_pb2.RUN_STATUS_PAUSED,
        1,
        2,
    )
    # Executed once more, as a resume (a fresh doom-loop count), not as a recovery.
    assert fleet.executor.executions == [False, True]
    stored = await events.read_events(db_pool, project_id=PROJECT, run_id=run_id)
    started = [e.event for e in stored if isinstance(e.event, events.RunStarted)]
    assert [(s.resumed, s.recovered) for s in started] == [(False, False), (True, False)]
    await wait_for(lambda: run_id not in fleet.worker.active_run_ids, "the worker to let go")


async def test_a_resume_queued_behind_is_cancelled_by_cancel_run(
    fleet: Fleet, db_pool: asyncpg.Pool
) -> None:
    run_id = await _paused_and_held(fleet)
    stream = await _resume_claimed_behind(fleet, db_pool, run_id)
    cancelled = await fleet.api.CancelRun(
        executor_pb2.CancelRunRequest(project_id=PROJECT, run_id=run_id, reason="not now")
    )
    assert cancelled.run.status == common_pb2.RUN_STATUS_RUNNING  # the worker ends it
    # The cancel request reached the queued execution, not the winding-down one.
    await wait_for(
        lambda: _control(fleet, run_id).cancel_reason == "not now",
        "the cancel to reach the worker",
    )

    fleet.executor.release.set()
    async with asyncio.timeout(STREAM_DEADLINE_S):
        resumed = await stream
    final = resumed[-1].run_finished.run
    assert final.status == common_pb2.RUN_STATUS_CANCELLED
    assert (final.resume_count, final.total_steps) == (1, 1)  # no step of the resume ran


async def test_a_resume_queued_behind_at_shutdown_is_handed_back_as_a_resume(
    fleet: Fleet, db_pool: asyncpg.Pool
) -> None:
    run_id = await _paused_and_held(fleet)
    stream = await _resume_claimed_behind(fleet, db_pool, run_id)

    # Shutdown while the resume waits: the winding-down execution ends within the drain, and
    # the resume, never begun, goes back as ResumeRun left it, for the next worker.
    fleet.stopping.set()
    await wait_for(
        lambda: _control(fleet, run_id).draining, "the worker to drain the queued execution"
    )
    fleet.executor.release.set()
    async with asyncio.timeout(STREAM_DEADLINE_S):
        await fleet.worker_loop
    row = await db_pool.fetchrow(
        "SELECT status, lease_owner, lease_expires_at <= now() AS expired "
        "FROM kb.agent_runs WHERE id = $1::uuid",
        run_id,
    )
    assert dict(row) == {"status": "running", "lease_owner": RESUME_LEASE_OWNER, "expired": True}
    assert fleet.executor.executions == [False]
    stream.cancel()
