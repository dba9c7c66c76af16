"""Issue 17, "errors that stop what cannot recover": how the dispatch loop meets an executor
that fails TriggerRun. A real gRPC executor stand-in on loopback answers every TriggerRun with
one status code and counts the calls; the dispatcher talks to it through its real
GrpcRunControl, against a real database.

- UNAUTHENTICATED (the dispatcher's service token is wrong or revoked) pauses dispatching
  with one error line: the executor is not called again while the pause lasts, and the task
  is released unchanged (not failed, no retry used) for a dispatcher with a good token.
- A transient code (UNAVAILABLE) is retried a bounded number of times; then the task is left
  to its lease, so the next try comes only when the lease has expired and the task is adopted.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import asyncpg
import grpc
import pytest_asyncio
import structlog

from agentfleet.testing.waiting import wait_for, wait_for_query
from agentfleet.v1 import executor_pb2, executor_pb2_grpc
from services.dispatcher.loop import Dispatcher
from services.dispatcher.runs import GrpcRunControl
from services.dispatcher.selector import Selector
from services.dispatcher.timing import CredentialPauseTiming, LoopTiming, TriggerRetry
from tests.integration.one_task_graph import one_task

PROJECT = "trigger-errors"


@dataclass(kw_only=True)
class FailingExecutor(executor_pb2_grpc.ExecutorServiceServicer):
    """Answers every TriggerRun with ``code``; records when each call came."""

    code: grpc.StatusCode
    calls: list[float] = field(default_factory=list)

    async def TriggerRun(
        self, request: executor_pb2.StartRunRequest, context: grpc.aio.ServicerContext
    ) -> executor_pb2.Run:
        self.calls.append(asyncio.get_running_loop().time())
        await context.abort(self.code, f"answered {self.code.name}")
        raise AssertionError("abort returns only by raising")


@dataclass(kw_only=True)
class Setup:
    executor: FailingExecutor
    runs: GrpcRunControl
    task_id: str


@contextlib.asynccontextmanager
async def failing_executor(pool: asyncpg.Pool, code: grpc.StatusCode) -> AsyncIterator[Setup]:
    """The stand-in on a loopback port, the dispatcher's channel to it, and one task."""
    executor = FailingExecutor(code=code)
    server = grpc.aio.server()
    executor_pb2_grpc.add_ExecutorServiceServicer_to_server(executor, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            task_id = await one_task(pool, PROJECT)
            yield Setup(executor=executor, runs=GrpcRunControl(channel), task_id=task_id)
    finally:
        await server.stop(None)


@pytest_asyncio.fixture
async def unauthenticated(db_pool: asyncpg.Pool) -> AsyncIterator[Setup]:
    async with failing_executor(db_pool, grpc.StatusCode.UNAUTHENTICATED) as setup:
        yield setup


@pytest_asyncio.fixture
async def unavailable(db_pool: asyncpg.Pool) -> AsyncIterator[Setup]:
    async with failing_executor(db_pool, grpc.StatusCode.UNAVAILABLE) as setup:
        yield setup


async def task_row(pool: asyncpg.Pool, task_id: str) -> asyncpg.Record:
    return await pool.fetchrow(
        "SELECT status, properties FROM kb.graph_objects WHERE id = $1::uuid", task_id
    )


async def test_a_rejected_credential_pauses_dispatching_with_one_error_line(
    db_pool: asyncpg.Pool, database_url: str, unauthenticated: Setup
) -> None:
    dispatcher = Dispatcher(
        db_pool,
        dsn=database_url,
        runs=unauthenticated.runs,
        selector=Selector(db_pool),
        timing=LoopTiming(
            poll_s=0.05, credential_pause=CredentialPauseTiming(first_s=60.0, max_s=60.0)
        ),
    )
    stopping = asyncio.Event()
    with structlog.testing.capture_logs() as logs:
        loop = asyncio.create_task(dispatcher.run(stopping))
        try:
            await wait_for(lambda: unauthenticated.executor.calls, "the first TriggerRun")
            await wait_for_query(
                db_pool,
                "SELECT (properties ->> 'lease_expires')::float8 = 0 "
                "FROM kb.graph_objects WHERE id = $1::uuid",
                unauthenticated.task_id,
                what="the rejected task's lease released",
            )
            # The window a retry-forever loop (0.1 s doubling to 2 s) calls in 5 more times,
            # while this dispatcher polls 60 times and its pause lasts a minute.
            await asyncio.sleep(3.0)
            calls = len(unauthenticated.executor.calls)
        finally:
            stopping.set()
            await loop
    assert calls == 1
    errors = [e for e in logs if e["log_level"] == "error"]
    assert len(errors) == 1, errors
    assert "credential" in errors[0]["event"]
    assert "UNAUTHENTICATED" in errors[0]["reason"]
    # Not the task's fault: still claimable by anyone, no retry used, no error written.
    row = await task_row(db_pool, unauthenticated.task_id)
    assert row["status"] == "in_progress"
    assert row["properties"]["retry_count"] == 0
    assert "error_message" not in row["properties"]
    assert await db_pool.fetchval("SELECT count(*) FROM kb.agent_runs") == 0


async def test_a_transient_trigger_error_is_retried_a_bounded_number_of_times(
    db_pool: asyncpg.Pool, database_url: str, unavailable: Setup
) -> None:
    lease_s = 2.0
    retry = TriggerRetry(attempts=3, first_wait_s=0.05, max_wait_s=0.1)
    dispatcher = Dispatcher(
        db_pool,
        dsn=database_url,
        runs=unavailable.runs,
        selector=Selector(db_pool),
        timing=LoopTiming(poll_s=0.05, lease_s=lease_s, trigger_retry=retry),
    )
    calls = unavailable.executor.calls
    stopping = asyncio.Event()
    loop = asyncio.create_task(dispatcher.run(stopping))
    try:
        # The claim's start gives up after 3 calls; the adoption after the lease, 3 more.
        await wait_for(lambda: len(calls) >= 2 * retry.attempts, "the adopted task's retries")
    finally:
        stopping.set()
        await loop
    first_start, second_start = calls[: retry.attempts], calls[retry.attempts :]
    assert first_start[-1] - first_start[0] < 1.0  # 0.05 s, then 0.1 s apart
    # Nothing between the gave-up start and the lease's end (less the heartbeat's last renewal).
    assert second_start[0] - first_start[-1] >= lease_s * 2 / 3 - 0.2
    row = await task_row(db_pool, unavailable.task_id)
    assert row["properties"]["retry_count"] == 0
    assert row["status"] == "in_progress"
