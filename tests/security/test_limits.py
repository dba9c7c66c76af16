"""Limits a caller cannot exhaust (issue #15, "Fairness and limits"; issue #20's quiet streams).

The token verdict cache is an LRU a flood of random tokens cannot empty; a token holds at
most AGENTFLEET_MAX_STREAMS_PER_TOKEN response streams (its project's tokens together
_PER_PROJECT) and a server runs at most AGENTFLEET_GRPC_MAX_CONCURRENT_RPCS RPCs, refused
past them with RESOURCE_EXHAUSTED; streams abandoned by their caller (cancelled, or a
deadline of milliseconds) end without one error line in the services' logs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import secrets
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import pytest

from agentfleet.auth import Principal, TokenAuthenticator, TokenStore, hash_token
from agentfleet.config import load_settings
from agentfleet.errors import Unauthenticated
from agentfleet.gemini_stub import GeminiStub, Reply, Script
from agentfleet.postgres import db
from agentfleet.process.service_runtime import server_limits
from agentfleet.rpc.grpc_limits import server_options
from agentfleet.settings.server_limits import ServerLimits
from agentfleet.testing import factories as f
from agentfleet.testing.database import DatabaseFactory
from agentfleet.testing.services import (
    Stack,
    create_service_tokens,
    start_process_stack,
    start_stack,
)
from agentfleet.testing.waiting import wait_for, wait_for_query
from agentfleet.v1 import (
    common_pb2,
    dispatcher_pb2,
    dispatcher_pb2_grpc,
    executor_pb2,
    executor_pb2_grpc,
    history_pb2,
    history_pb2_grpc,
    registry_pb2,
    registry_pb2_grpc,
)

P = "alpha"

# --- the token verdict cache ------------------------------------------------------------


class CountingLookup:
    """The token table in memory, counting reads per hash."""

    def __init__(self) -> None:
        self.principals: dict[str, Principal] = {}
        self.reads: Counter[str] = Counter()

    def add(self, token: str, project_id: str) -> None:
        self.principals[hash_token(token)] = Principal(
            token_id=token, project_id=project_id, role="member"
        )

    async def find_active(self, token_hash: str) -> Principal | None:
        self.reads[token_hash] += 1
        return self.principals.get(token_hash)


async def test_a_flood_of_random_tokens_never_evicts_a_hot_valid_token() -> None:
    lookup = CountingLookup()
    lookup.add("af_hot", P)
    authenticator = TokenAuthenticator(lookup)  # the services' defaults
    assert (await authenticator.authenticate("af_hot")).project_id == P

    for i in range(20_000):
        with pytest.raises(Unauthenticated):
            await authenticator.authenticate(f"af_{secrets.token_hex(16)}")
        if i % 1000 == 0:
            assert (await authenticator.authenticate("af_hot")).project_id == P

    assert (await authenticator.authenticate("af_hot")).project_id == P
    assert lookup.reads[hash_token("af_hot")] == 1  # never read again: always a cache hit
    assert sum(lookup.reads.values()) == 20_001


async def test_verdicts_are_evicted_least_recently_used_first() -> None:
    lookup = CountingLookup()
    for name in ("a", "b", "c"):
        lookup.add(f"af_{name}", P)
    authenticator = TokenAuthenticator(lookup, max_entries=2, max_refusals=2)
    await authenticator.authenticate("af_a")
    await authenticator.authenticate("af_b")
    await authenticator.authenticate("af_a")  # a is now the most recently used
    await authenticator.authenticate("af_c")  # evicts b, not a
    await authenticator.authenticate("af_a")
    await authenticator.authenticate("af_b")
    assert lookup.reads[hash_token("af_a")] == 1
    assert lookup.reads[hash_token("af_b")] == 2

    # Refusals are cached too (a repeated bad token costs no read), in their own LRU.
    for _ in range(3):
        with pytest.raises(Unauthenticated):
            await authenticator.authenticate("af_forged")
    assert lookup.reads[hash_token("af_forged")] == 1


# --- gRPC server limits -----------------------------------------------------------------


def test_server_limits_come_from_the_settings_with_documented_defaults() -> None:
    assert server_limits(load_settings({})) == ServerLimits()
    limits = server_limits(
        load_settings(
            {
                "AGENTFLEET_GRPC_MAX_CONCURRENT_RPCS": "50",
                "AGENTFLEET_GRPC_MAX_STREAMS_PER_CONNECTION": "20",
                "AGENTFLEET_MAX_STREAMS_PER_TOKEN": "5",
                "AGENTFLEET_MAX_STREAMS_PER_PROJECT": "6",
                "AGENTFLEET_MAX_UNARY_PER_TOKEN": "7",
                "AGENTFLEET_MAX_UNARY_PER_PROJECT": "9",
                "AGENTFLEET_GRPC_KEEPALIVE_S": "30",
                "AGENTFLEET_GRPC_KEEPALIVE_TIMEOUT_S": "5",
                "AGENTFLEET_GRPC_MIN_PING_INTERVAL_S": "15",
                "AGENTFLEET_GRPC_MAX_CONNECTION_IDLE_S": "120",
                "AGENTFLEET_GRPC_MAX_CONNECTION_AGE_S": "600",
                "AGENTFLEET_GRPC_MAX_CONNECTION_AGE_GRACE_S": "30",
            }
        )
    )
    assert (limits.max_concurrent_rpcs, limits.max_streams_per_token) == (50, 5)
    assert limits.max_streams_per_project == 6
    assert (limits.max_unary_per_token, limits.max_unary_per_project) == (7, 9)
    assert dict(server_options(limits)) == {
        "grpc.max_concurrent_streams": 20,
        "grpc.keepalive_time_ms": 30_000,
        "grpc.keepalive_timeout_ms": 5_000,
        "grpc.http2.min_ping_interval_without_data_ms": 15_000,
        "grpc.http2.max_ping_strikes": 2,
        "grpc.max_connection_idle_ms": 120_000,
        "grpc.max_connection_age_ms": 600_000,
        "grpc.max_connection_age_grace_ms": 30_000,
    }


@contextlib.asynccontextmanager
async def _history_stack(
    database_url: str, db_pool: asyncpg.Pool, **environ: str
) -> AsyncIterator[Stack]:
    stack = await start_stack(
        database_url=database_url, pool=db_pool, environ=environ, names=("history",)
    )
    try:
        yield stack
    finally:
        await stack.close()


async def _running_run(db_pool: asyncpg.Pool, project_id: str = P) -> str:
    """A run that stays running: its watchers get three events, then wait."""
    run = await f.insert_run(db_pool, project_id=project_id, agent_name="slow", status="running")
    await f.append(db_pool, run=run, events=f.start_events(run))
    return str(run["id"])


async def _open_watch(
    stack: Stack, token: str, run_id: str, project_id: str = P
) -> grpc.aio.UnaryStreamCall:
    """A WatchRun stream the server has admitted (its first event has arrived)."""
    history = history_pb2_grpc.HistoryServiceStub(stack.channel("history", token=token))
    call = history.WatchRun(history_pb2.WatchRunRequest(project_id=project_id, run_id=run_id))
    first = await asyncio.wait_for(call.read(), 10)
    assert isinstance(first, common_pb2.RunEvent)
    return call


async def _try_open(
    stack: Stack, token: str, run_id: str
) -> grpc.aio.UnaryStreamCall | grpc.StatusCode:
    try:
        return await _open_watch(stack, token, run_id)
    except grpc.aio.AioRpcError as exc:
        return exc.code()


async def _refusal(stack: Stack, token: str, run_id: str) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await _open_watch(stack, token, run_id)
    return caught.value


async def test_a_token_holds_at_most_its_limit_of_streams(
    database_url: str, db_pool: asyncpg.Pool
) -> None:
    async with _history_stack(database_url, db_pool, AGENTFLEET_MAX_STREAMS_PER_TOKEN="3") as stack:
        token, other = await stack.create_token(P, "member"), await stack.create_token(P)
        run_id = await _running_run(db_pool)
        open_calls = [await _open_watch(stack, token, run_id) for _ in range(3)]

        refused = await _refusal(stack, token, run_id)
        assert refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "3 open streams" in (refused.details() or "")
        assert "AGENTFLEET_MAX_STREAMS_PER_TOKEN" in (refused.details() or "")
        # Per token: another token of the project, and unary calls of this one, go on.
        await _open_watch(stack, other, run_id)
        history = history_pb2_grpc.HistoryServiceStub(stack.channel("history", token=token))
        await history.GetRun(history_pb2.GetRunRequest(project_id=P, run_id=run_id))

        # Closing one frees a slot (once the server has seen the cancellation).
        open_calls.pop().cancel()

        async def reopened() -> Any:
            opened = await _try_open(stack, token, run_id)
            if isinstance(opened, grpc.StatusCode):
                assert opened == grpc.StatusCode.RESOURCE_EXHAUSTED
                return None
            return opened

        open_calls.append(
            await wait_for(reopened, "the cancelled stream's slot to be freed", timeout_s=10)
        )
        assert (await _refusal(stack, token, run_id)).code() == (grpc.StatusCode.RESOURCE_EXHAUSTED)
        for call in open_calls:
            call.cancel()


async def test_a_projects_tokens_hold_at_most_its_limit_of_streams(
    database_url: str, db_pool: asyncpg.Pool
) -> None:
    # Before the project's cap, each of a project's tokens could open the per-token cap.
    caps = {"AGENTFLEET_MAX_STREAMS_PER_TOKEN": "3", "AGENTFLEET_MAX_STREAMS_PER_PROJECT": "4"}
    async with _history_stack(database_url, db_pool, **caps) as stack:
        first, second = await stack.create_token(P), await stack.create_token(P, "member")
        run_id = await _running_run(db_pool)
        open_calls = [await _open_watch(stack, token, run_id) for token in [first] * 3 + [second]]
        # The second token is under its cap (1 of 3), its project at its own (4); others go on.
        refused = await _refusal(stack, second, run_id)
        assert refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert f"project {P!r} already has 4 open streams" in (refused.details() or "")
        assert "AGENTFLEET_MAX_STREAMS_PER_PROJECT" in (refused.details() or "")
        victim, victim_run = await stack.create_token("beta"), await _running_run(db_pool, "beta")
        open_calls.append(await _open_watch(stack, victim, victim_run, "beta"))
        history = history_pb2_grpc.HistoryServiceStub(stack.channel("history", token=second))
        await history.GetRun(history_pb2.GetRunRequest(project_id=P, run_id=run_id))
        for call in open_calls:
            call.cancel()


async def test_a_server_runs_at_most_its_limit_of_rpcs(
    database_url: str, db_pool: asyncpg.Pool
) -> None:
    async with _history_stack(
        database_url, db_pool, AGENTFLEET_GRPC_MAX_CONCURRENT_RPCS="4"
    ) as stack:
        tokens = [await stack.create_token(P, "member") for _ in range(4)]
        run_id = await _running_run(db_pool)
        open_calls = [await _open_watch(stack, token, run_id) for token in tokens]
        history = history_pb2_grpc.HistoryServiceStub(stack.channel("history", token=tokens[0]))
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await history.GetRun(history_pb2.GetRunRequest(project_id=P, run_id=run_id))
        assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "Concurrent RPC limit" in (caught.value.details() or "")
        for call in open_calls:
            call.cancel()


# --- abandoned streams end quietly ------------------------------------------------------

QUIET_MARKERS = (
    "created in a different Context",
    "Task exception was never retrieved",
    "Failed to detach context",
    "Traceback",
)


def loud_lines(log: str) -> list[str]:
    """Error-level lines (JSON ``level`` error/critical, or plain text) and known noise."""
    loud = []
    for line in log.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if isinstance(record, dict):
            if record.get("level") in ("error", "critical", "exception"):
                loud.append(line)
        elif "ERROR" in line or "CRITICAL" in line:
            loud.append(line)
        if any(marker in line for marker in QUIET_MARKERS):
            loud.append(line)
    return loud


async def _abandon(call: Any, how: str) -> None:
    """Reads the first message then cancels, or lets a millisecond deadline expire."""
    code = grpc.StatusCode.OK
    try:
        if how == "cancel":
            await asyncio.wait_for(call.read(), 20)
            call.cancel()
        else:
            async for _ in call:
                pass
    except grpc.aio.AioRpcError as exc:
        code = exc.code()
    assert code in (grpc.StatusCode.OK, grpc.StatusCode.DEADLINE_EXCEEDED), code


async def test_abandoned_streams_leave_no_error_in_the_service_logs(
    database_factory: DatabaseFactory, gemini_stub: GeminiStub, tmp_path: Path
) -> None:
    database_url = await database_factory.create_database()
    pool = await db.create_pool(database_url, min_size=1, max_size=4)
    gemini_stub.add_script(
        Script(name="quick", policy=lambda request: Reply(text="done", delay_s=0.05))
    )
    stack = await start_process_stack(
        database_url=database_url,
        log_dir=tmp_path,
        environ={
            "AGENTFLEET_AUTH": "on",
            "AGENTFLEET_GEMINI_BASE_URL": gemini_stub.base_url or "",
            "AGENTFLEET_SHUTDOWN_GRACE_S": "5",
        },
        service_tokens=await create_service_tokens(pool),
    )
    try:
        token = await _admin_token(pool)
        channels = {
            name: grpc.aio.insecure_channel(address) for name, address in stack.addresses.items()
        }
        auth = (("authorization", f"Bearer {token}"),)
        registry = registry_pb2_grpc.AgentRegistryServiceStub(channels["executor"])
        await registry.UpsertAgentDefinition(
            registry_pb2.UpsertAgentDefinitionRequest(
                project_id=P,
                agent_definition=common_pb2.AgentDefinition(
                    name="quick",
                    system_prompt="You are quick.",
                    model=common_pb2.ModelConfig(name="gemini-test"),
                ),
            ),
            metadata=auth,
        )
        executor = executor_pb2_grpc.ExecutorServiceStub(channels["executor"])
        history = history_pb2_grpc.HistoryServiceStub(channels["history"])
        dispatcher = dispatcher_pb2_grpc.DispatcherServiceStub(channels["dispatcher"])
        watched = await _running_run(pool)
        graph = await dispatcher.CreateTaskGraph(
            dispatcher_pb2.CreateTaskGraphRequest(
                project_id=P,
                tasks=[dispatcher_pb2.TaskSpec(key="a", title="do a", assigned_agent="quick")],
            ),
            metadata=auth,
        )
        rng = random.Random(15)

        def stream(i: int) -> Any:
            deadline = None if i % 2 == 0 else rng.choice((0.001, 0.002, 0.003))
            kind = i % 3
            if kind == 0:
                request = history_pb2.WatchRunRequest(project_id=P, run_id=watched)
                return history.WatchRun(request, metadata=auth, timeout=deadline)
            if kind == 1:
                run = executor_pb2.StartRunRequest(project_id=P, agent_name="quick", input="x")
                return executor.StartRun(run, metadata=auth, timeout=deadline)
            watch = dispatcher_pb2.WatchTaskGraphRequest(
                project_id=P, task_graph_id=graph.task_graph.id
            )
            return dispatcher.WatchTaskGraph(watch, metadata=auth, timeout=deadline)

        await asyncio.gather(
            *(_abandon(stream(i), "cancel" if i % 2 == 0 else "deadline") for i in range(100))
        )
        # Every run the abandoned StartRuns queued finishes (the run outlives its stream).
        await wait_for_query(
            pool,
            "SELECT count(*) = 0 FROM kb.agent_runs WHERE agent_name = 'quick' "
            "AND status NOT IN ('completed', 'failed', 'cancelled')",
        )
        for channel in channels.values():
            await channel.close()
    finally:
        codes = await stack.stop(grace_s=15.0)
        await pool.close()
        await database_factory.drop_database(database_url)
    assert all(code == 0 for code in codes.values()), codes
    for name in stack.processes:
        assert loud_lines(stack.log(name)) == [], name


async def _admin_token(pool: asyncpg.Pool) -> str:
    return (await TokenStore(pool).create(project_id=P, role="admin")).token
