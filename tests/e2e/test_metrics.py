"""Metrics scraped from real service processes (issue 18): the four services started with
``python -m``, each serving ``/metrics`` on its own loopback port; three runs on the stub
model (one watched, one streamed, one dispatched from a task graph) calling a tool of a
real stdio MCP server. Every figure is read before and after (or waited for while the work
is under way, with a deadline) and must have moved."""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import aiohttp
import asyncpg
import pytest
import pytest_asyncio
from prometheus_client.parser import text_string_to_metric_families

from agentfleet.auth import TokenStore
from agentfleet.config import load_settings
from agentfleet.gemini_stub import Call, GeminiStub, Reply, Script
from agentfleet.postgres import db
from agentfleet.rpc.clients import open_channel
from agentfleet.testing.database import DatabaseFactory
from agentfleet.testing.services import (
    START_ORDER,
    ProcessStack,
    create_service_tokens,
    free_port,
    start_process_stack,
)
from agentfleet.testing.stdio_allowlist import TEST_SERVER
from agentfleet.testing.waiting import wait_for
from agentfleet.v1 import (
    dispatcher_pb2,
    dispatcher_pb2_grpc,
    executor_pb2,
    executor_pb2_grpc,
    history_pb2,
    history_pb2_grpc,
    toolpool_pb2,
    toolpool_pb2_grpc,
)
from services.executor.registry.definitions import AgentDefinition, DefinitionRepository
from services.executor.registry.model_config import ModelConfig

pytestmark = pytest.mark.e2e

MODEL = "gemini-metrics"
Samples = dict[str, list[tuple[dict[str, str], float]]]


@dataclass(kw_only=True, slots=True)
class Metered:
    pool: asyncpg.Pool
    stub: GeminiStub
    stack: ProcessStack
    metrics_ports: dict[str, int]

    async def scrape(self, service: str) -> Samples:
        """Every sample of the service's /metrics, by sample name."""
        url = f"http://127.0.0.1:{self.metrics_ports[service]}/metrics"
        async with aiohttp.ClientSession() as session, session.get(url) as response:
            assert response.status == 200
            text = await response.text()
        samples: Samples = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                samples.setdefault(sample.name, []).append((sample.labels, sample.value))
        return samples

    async def wait_for(
        self, service: str, check: Callable[[Samples], bool], what: str, timeout_s: float = 15
    ) -> Samples:
        async def seen() -> Samples | None:
            samples = await self.scrape(service)
            return samples if check(samples) else None

        return await wait_for(seen, f"{service}: {what}", timeout_s=timeout_s, interval_s=0.1)


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sum of the samples called ``name`` whose labels include ``labels``."""
    return sum(v for found, v in samples.get(name, []) if labels.items() <= found.items())


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def metered(
    database_factory: DatabaseFactory, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Metered]:
    database_url = await database_factory.create_database()
    pool = await db.create_pool(database_url, min_size=1, max_size=4)
    stub = GeminiStub()
    await stub.start()
    ports = {name: free_port() for name in START_ORDER}
    env = {
        "AGENTFLEET_GEMINI_BASE_URL": stub.base_url or "",
        "AGENTFLEET_SHUTDOWN_GRACE_S": "3",
        "AGENTFLEET_METRICS_SAMPLE_S": "0.1",
        **{f"AGENTFLEET_{name.upper()}_METRICS_PORT": str(p) for name, p in ports.items()},
    }
    stack = await start_process_stack(
        database_url=database_url,
        log_dir=tmp_path_factory.mktemp("metrics"),
        environ=env,
        names=START_ORDER,
        service_tokens=await create_service_tokens(pool, label="e2e"),
    )
    try:
        yield Metered(pool=pool, stub=stub, stack=stack, metrics_ports=ports)
    finally:
        await stack.stop(grace_s=5.0)
        await stub.stop()
        await pool.close()
        await database_factory.drop_database(database_url)


async def test_each_service_serves_prometheus_metrics(metered: Metered) -> None:
    for service in START_ORDER:
        samples = await metered.scrape(service)
        # Every process reports its database pool, sized by AGENTFLEET_DB_POOL_MAX.
        assert (
            value(samples, "db_client_connection_max", db_client_connection_pool_name=service)
            == load_settings({}).db_pool_max
        )
        assert value(samples, "db_client_connection_count", db_client_connection_state="used") >= 0
        assert "target_info" in samples


async def test_the_figures_move_with_runs_tool_calls_watches_and_dispatches(
    metered: Metered,
) -> None:
    project_id = f"metrics-{uuid.uuid4().hex[:8]}"
    token = (
        await TokenStore(metered.pool).create(project_id=project_id, role="admin", name="e2e")
    ).token
    marker = f"[{project_id}]"
    channels = {
        name: open_channel(metered.stack.addresses[name], token=token) for name in START_ORDER
    }
    executor = executor_pb2_grpc.ExecutorServiceStub(channels["executor"])
    history = history_pb2_grpc.HistoryServiceStub(channels["history"])
    toolpool = toolpool_pb2_grpc.ToolPoolServiceStub(channels["toolpool"])
    dispatcher = dispatcher_pb2_grpc.DispatcherServiceStub(channels["dispatcher"])
    await toolpool.UpsertMcpServer(
        toolpool_pb2.UpsertMcpServerRequest(
            project_id=project_id,
            mcp_server=toolpool_pb2.McpServer(
                name="test",
                transport=toolpool_pb2.MCP_TRANSPORT_STDIO,
                command=sys.executable,
                args=[TEST_SERVER, "--transport", "stdio"],
            ),
        )
    )
    await DefinitionRepository(metered.pool).upsert(
        project_id,
        AgentDefinition(
            name="worker",
            system_prompt=f"You echo. {marker}",
            model=ModelConfig(name=MODEL),
            tools=["test__echo"],
            is_default=True,
        ),
    )
    # Step 1 calls the MCP tool; step 2 answers after a pause in which the run is running.
    metered.stub.add_script(
        Script(
            name=marker,
            match_system=marker,
            per_conversation=True,
            replies=[
                Reply(text="Echoing.", calls=[Call("test__echo", {"text": "hi"})]),
                Reply(text="Echoed.", delay_s=1.0),
            ],
        )
    )
    before = {service: await metered.scrape(service) for service in START_ORDER}

    # 1. A triggered run, watched on the history: a subscriber while it streams, and the
    #    run counted as running in its project while the model pauses.
    run = await executor.TriggerRun(
        executor_pb2.StartRunRequest(project_id=project_id, agent_name="worker", input="one")
    )
    watch = history.WatchRun(history_pb2.WatchRunRequest(project_id=project_id, run_id=run.id))
    events = asyncio.ensure_future(_drain(watch))
    await metered.wait_for(
        "history", lambda s: value(s, "agentfleet_watch_subscribers") >= 1, "a WatchRun subscriber"
    )
    await metered.wait_for(
        "executor",
        lambda s: (
            value(
                s,
                "agentfleet_runs_active",
                agentfleet_project_id=project_id,
                agentfleet_run_status="running",
            )
            == 1
        ),
        "the project's running run",
    )
    async with asyncio.timeout(30):
        await events
    await metered.wait_for(
        "history", lambda s: value(s, "agentfleet_watch_subscribers") == 0, "the subscriber gone"
    )

    # 2. A run streamed by StartRun to its end.
    async with asyncio.timeout(30):
        async for _ in executor.StartRun(
            executor_pb2.StartRunRequest(project_id=project_id, agent_name="worker", input="two")
        ):
            pass

    # 3. A task graph of one task: dispatched, in progress while its run pauses, done.
    created = await dispatcher.CreateTaskGraph(
        dispatcher_pb2.CreateTaskGraphRequest(
            project_id=project_id,
            tasks=[dispatcher_pb2.TaskSpec(key="t1", title="echo it", max_retries=0)],
        )
    )
    await metered.wait_for(
        "dispatcher",
        lambda s: value(s, "agentfleet_tasks", agentfleet_task_state="in_progress") >= 1,
        "a task in progress",
    )
    async with asyncio.timeout(30):
        async for _ in dispatcher.WatchTaskGraph(
            dispatcher_pb2.WatchTaskGraphRequest(
                project_id=project_id, task_graph_id=created.task_graph.id
            )
        ):
            pass
    for channel in channels.values():
        await channel.close()

    # The executor: three runs finished, two steps each, six model calls with their tokens.
    after = await metered.wait_for(
        "executor",
        lambda s: (
            _delta(
                s, before["executor"], "agentfleet_runs_finished_total", gen_ai_agent_name="worker"
            )
            == 3
        ),
        "three finished runs",
    )
    finished = {"gen_ai_agent_name": "worker", "agentfleet_run_status": "completed"}
    assert _delta(after, before["executor"], "agentfleet_runs_finished_total", **finished) == 3
    assert (
        _delta(after, before["executor"], "agentfleet_run_duration_seconds_count", **finished) == 3
    )
    # Each run paused a second in its second step.
    assert _delta(after, before["executor"], "agentfleet_run_duration_seconds_sum", **finished) >= 3
    assert (
        _delta(
            after,
            before["executor"],
            "agentfleet_step_duration_seconds_count",
            gen_ai_agent_name="worker",
        )
        == 6
    )
    model = {"gen_ai_request_model": MODEL, "gen_ai_operation_name": "chat"}
    assert (
        _delta(after, before["executor"], "gen_ai_client_operation_duration_seconds_count", **model)
        == 6
    )
    for kind in ("input", "output"):
        tokens = _delta(
            after,
            before["executor"],
            "gen_ai_client_token_usage_sum",
            gen_ai_token_type=kind,
            **model,
        )
        assert tokens > 0, kind
    start_run = {
        "rpc_method": "agentfleet.v1.ExecutorService/StartRun",
        "rpc_response_status_code": "OK",
    }
    assert (
        _delta(after, before["executor"], "rpc_server_call_duration_seconds_count", **start_run)
        == 1
    )
    await metered.wait_for(
        "executor",
        lambda s: value(s, "agentfleet_runs_active", agentfleet_project_id=project_id) == 0,
        "the project without active runs",
    )

    # The toolpool: three MCP tool calls by tool and source, one live session, closed breaker.
    toolpool_now = await metered.scrape("toolpool")
    call = {"gen_ai_tool_name": "test__echo", "agentfleet_tool_source": "mcp:test"}
    assert (
        _delta(
            toolpool_now, before["toolpool"], "agentfleet_tool_call_duration_seconds_count", **call
        )
        == 3
    )
    assert (
        value(toolpool_now, "agentfleet_mcp_sessions")
        >= 1
        > value(before["toolpool"], "agentfleet_mcp_sessions")
    )
    assert (
        value(toolpool_now, "agentfleet_mcp_breakers", agentfleet_mcp_breaker_state="closed") >= 1
    )

    # The history served one WatchRun; the dispatcher dispatched one task.
    history_now = await metered.scrape("history")
    watch_run = {
        "rpc_method": "agentfleet.v1.HistoryService/WatchRun",
        "rpc_response_status_code": "OK",
    }
    assert (
        _delta(
            history_now, before["history"], "rpc_server_call_duration_seconds_count", **watch_run
        )
        == 1
    )
    dispatcher_now = await metered.wait_for(
        "dispatcher",
        lambda s: value(s, "agentfleet_tasks", agentfleet_task_state="in_progress") == 0,
        "no task in progress",
    )
    assert (
        _delta(dispatcher_now, before["dispatcher"], "agentfleet_dispatch_duration_seconds_count")
        == 1
    )


def _delta(after: Samples, before: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


async def _drain(stream: AsyncIterator[object]) -> None:
    async for _ in stream:
        pass


async def test_quota_waits_and_429s_are_counted_by_model(metered: Metered) -> None:
    project_id = f"quota-{uuid.uuid4().hex[:8]}"
    token = (
        await TokenStore(metered.pool).create(project_id=project_id, role="admin", name="e2e")
    ).token
    model = f"gemini-{project_id}"
    marker = f"[{project_id}]"
    await DefinitionRepository(metered.pool).upsert(
        project_id,
        AgentDefinition(name="limited", system_prompt=marker, model=ModelConfig(name=model)),
    )
    metered.stub.add_script(
        Script(
            name=marker,
            match_system=marker,
            replies=[Reply(error_status=429, retry_delay_s=3), Reply(text="done")],
        )
    )
    by_model = {"gen_ai_request_model": model}
    channel = open_channel(metered.stack.addresses["executor"], token=token)
    executor = executor_pb2_grpc.ExecutorServiceStub(channel)
    try:
        run = await executor.TriggerRun(
            executor_pb2.StartRunRequest(project_id=project_id, agent_name="limited", input="go")
        )
        during = await metered.wait_for(
            "executor",
            lambda s: value(s, "agentfleet_model_quota_waiting", **by_model) == 1,
            "the model call waiting for its quota",
        )
        assert value(during, "agentfleet_model_rate_limited_total", **by_model) == 1
        await wait_for(
            lambda: metered.pool.fetchval(
                "SELECT status = 'completed' FROM kb.agent_runs WHERE id = $1", run.id
            ),
            "the run completed after the wait",
        )
    finally:
        await channel.close()
    after = await metered.scrape("executor")
    assert value(after, "agentfleet_model_quota_waiting", **by_model) == 0
    assert value(after, "agentfleet_model_quota_wait_duration_seconds_count", **by_model) == 1
    assert (
        value(after, "agentfleet_model_quota_wait_duration_seconds_sum", **by_model) >= 2
    )  # shown after 0.5 s of it
    assert value(after, "agentfleet_model_rate_limited_total", **by_model) == 1
