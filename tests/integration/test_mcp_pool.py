"""McpClientPool against real MCP servers: the test server over stdio, SSE and streamable
HTTP, and the published ``mcp-server-time`` over stdio."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import ipaddress
import os
import signal
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import pytest
import pytest_asyncio
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentfleet.egress import EgressPolicy
from agentfleet.mcp.servers import McpServerConfig
from agentfleet.postgres.db import Listener
from agentfleet.testing.stdio_allowlist import TEST_STDIO_COMMANDS
from agentfleet.testing.waiting import wait_for
from services.toolpool.mcp import (
    CircuitBreaker,
    McpCallResult,
    McpClientPool,
    McpServerStore,
    McpUnavailableError,
    MissingSecretError,
)

from .mcp_test_servers import HttpServer, children, free_port, stdio_config

STDIO_MARK = "--transport stdio"
# A stdio server that starts and never answers: allowed for this module's pool only.
SILENT = (sys.executable, "-c", "import sys; sys.stdin.read()")
HTTP_TRANSPORTS = ["sse", "streamable_http"]


@pytest.fixture(scope="module", autouse=True)
def booting_http_servers() -> Iterator[dict[str, HttpServer]]:
    """One test server per HTTP transport for this module, booting while stdio tests run."""
    servers = {t: HttpServer(t).start() for t in HTTP_TRANSPORTS}
    try:
        yield servers
    finally:
        for server in servers.values():
            server.kill()


@pytest.fixture
def http_servers(booting_http_servers: dict[str, HttpServer]) -> dict[str, HttpServer]:
    for server in booting_http_servers.values():
        server.wait_accepting()
    return booting_http_servers


@pytest_asyncio.fixture
async def pool() -> AsyncIterator[McpClientPool]:
    pool = McpClientPool(
        new_breaker=functools.partial(CircuitBreaker, failure_threshold=2, cool_down_s=0.3),
        stdio_allowlist=(*TEST_STDIO_COMMANDS, SILENT),
        # The test servers listen on loopback, which the egress guard refuses by default.
        egress=EgressPolicy(allowed_networks=(ipaddress.ip_network("127.0.0.1/32"),)),
    )
    try:
        yield pool
    finally:
        await pool.aclose()


def structured(result: McpCallResult) -> object:
    """The ``result`` value of a successful call's structured content."""
    assert not result.is_error, result.error
    return result.result["structured_content"]["result"]


async def test_stdio_lazy_shared_session_with_secret_env_timeout_and_errors(
    pool: McpClientPool,
) -> None:
    config = stdio_config("local", env={"API_TOKEN": "${TOKEN}"})
    secrets = {"TOKEN": "tok-123"}
    assert children(STDIO_MARK) == []
    assert await pool.list_tools(config, secrets) == await pool.list_tools(config, secrets)
    [child] = children(STDIO_MARK)

    # The secret reached the child's environment; the toolpool's own did not.
    assert structured(await pool.call_tool(config, secrets, "env", {"name": "API_TOKEN"})) == (
        "tok-123"
    )
    assert structured(await pool.call_tool(config, secrets, "env", {"name": "PGPASSWORD"})) == ""

    # Concurrent calls share the session and do not queue behind each other.
    slow = asyncio.create_task(pool.call_tool(config, secrets, "slow", {"seconds": 0.5}))
    pid = await pool.call_tool(config, secrets, "pid", {})
    assert not slow.done()
    assert structured(pid) == child
    assert structured(await slow) == "done"
    assert children(STDIO_MARK) == [child]

    # Per-call timeout; the session survives it.
    timed_out = await pool.call_tool(config, secrets, "slow", {"seconds": 30}, timeout_s=0.2)
    assert (timed_out.is_error, timed_out.outcome) == (True, "timeout")
    assert "0.2 s" in timed_out.error
    assert timed_out.duration_s < 2

    failed = await pool.call_tool(config, secrets, "fail", {})
    assert (failed.is_error, failed.outcome) == (True, "tool_error")
    assert "always fails" in failed.error
    assert pool.breaker_state("proj-mcp", "local") == "closed"
    assert structured(await pool.call_tool(config, secrets, "pid", {})) == child


async def test_stdio_recovers_after_kill_and_aclose_leaves_no_child(pool: McpClientPool) -> None:
    config = stdio_config("killed")
    first = structured(await pool.call_tool(config, {}, "pid", {}))
    os.kill(first, signal.SIGKILL)
    await wait_for(lambda: not pool.is_connected("proj-mcp", "killed"), "the death noticed")
    second = structured(await pool.call_tool(config, {}, "pid", {}))
    assert second != first
    assert children(STDIO_MARK) == [second]

    await pool.aclose()
    assert children(STDIO_MARK) == []
    closed = await pool.call_tool(config, {}, "pid", {})
    assert (closed.outcome, closed.error) == ("unavailable", "the MCP client pool is closed")


@pytest.mark.parametrize("transport", HTTP_TRANSPORTS)
async def test_http_lazy_shared_session_headers_and_trace_context(
    pool: McpClientPool,
    http_servers: dict[str, HttpServer],
    transport: str,
    spans: InMemorySpanExporter,  # installs the SDK tracer provider
) -> None:
    server = http_servers[transport]
    config = server.config(f"remote-{transport}", headers={"X-Api-Key": "key-${TOKEN}"})
    secrets = {"TOKEN": "abc"}
    before = await server.stats()
    assert not pool.is_connected("proj-mcp", config.name)

    results = await asyncio.gather(
        *(pool.call_tool(config, secrets, "echo", {"text": str(i)}) for i in range(3)),
        pool.call_tool(config, secrets, "header", {"name": "x-api-key"}),
    )
    assert [structured(r) for r in results] == ["0", "1", "2", "key-abc"]
    after = await server.stats()
    assert after["initialize"] - before["initialize"] == 1

    with trace.get_tracer("test").start_as_current_span("caller") as span:
        traceparent = structured(
            await pool.call_tool(config, secrets, "header", {"name": "traceparent"})
        )
    trace_id = format(span.get_span_context().trace_id, "032x")
    assert isinstance(traceparent, str)
    assert traceparent.split("-")[1] == trace_id
    assert (await server.stats())["initialize"] == after["initialize"]


@pytest.mark.parametrize("transport", HTTP_TRANSPORTS)
async def test_http_recovers_after_the_server_restarts(
    pool: McpClientPool, http_servers: dict[str, HttpServer], transport: str
) -> None:
    server = http_servers[transport]
    config = server.config("restarting")
    assert structured(await pool.call_tool(config, {}, "echo", {"text": "a"})) == "a"
    server.kill()
    if transport == "sse":
        # The event stream breaks with the server: the pool notices on its own.
        await wait_for(lambda: not pool.is_connected("proj-mcp", "restarting"), "the drop")
    server.start().wait_accepting()  # same port
    # Streamable HTTP: the new server refuses the old session id; the pool reconnects and
    # retries, since the refused request never ran.
    assert structured(await pool.call_tool(config, {}, "echo", {"text": "b"})) == "b"
    assert (await server.stats())["initialize"] == 1


async def test_breaker_opens_after_failures_and_closes_after_a_good_probe(
    pool: McpClientPool, http_servers: dict[str, HttpServer]
) -> None:
    server = http_servers["streamable_http"]
    config = server.config("flaky")
    for _ in range(2):
        slow = await pool.call_tool(config, {}, "slow", {"seconds": 30}, timeout_s=0.1)
        assert slow.outcome == "timeout"
    assert pool.breaker_state("proj-mcp", "flaky") == "open"

    calls = (await server.stats())["tool_calls"]
    rejected = await pool.call_tool(config, {}, "echo", {"text": "x"})
    assert (rejected.is_error, rejected.outcome) == (True, "circuit_open")
    assert "circuit open" in rejected.error
    assert (await server.stats())["tool_calls"] == calls  # rejected without trying

    await wait_for(lambda: pool.breaker_state("proj-mcp", "flaky") == "half_open", "cool-down")
    assert structured(await pool.call_tool(config, {}, "echo", {"text": "probe"})) == "probe"
    assert pool.breaker_state("proj-mcp", "flaky") == "closed"


async def test_unreachable_server_opens_the_breaker(pool: McpClientPool) -> None:
    config = McpServerConfig(
        project_id="proj-mcp",
        name="nowhere",
        transport="streamable_http",
        url=f"http://127.0.0.1:{free_port()}/mcp",
        connect_timeout_s=2,
    )
    for _ in range(2):
        result = await pool.call_tool(config, {}, "echo", {"text": "x"})
        assert result.outcome == "unavailable"
        assert "cannot connect to MCP server proj-mcp/nowhere" in result.error
    with pytest.raises(McpUnavailableError, match="circuit open"):
        await pool.list_tools(config, {})


async def test_missing_secret_is_reported_clearly_and_nothing_starts(
    pool: McpClientPool,
) -> None:
    config = stdio_config("secretive", env={"API_TOKEN": "${TOKEN}"}, args=("${ARG}",))
    result = await pool.call_tool(config, {"ARG": "x"}, "echo", {"text": "x"})
    assert (result.is_error, result.outcome) == (True, "config_error")
    assert result.error == "project secret not set: ${TOKEN} in mcp_server.env[API_TOKEN]"
    with pytest.raises(MissingSecretError) as caught:
        await pool.list_tools(config, {})
    assert caught.value.missing == [
        ("ARG", "mcp_server.args[0]"),
        ("TOKEN", "mcp_server.env[API_TOKEN]"),
    ]
    with pytest.raises(MissingSecretError):
        await pool.test_server(config, {})
    assert children(STDIO_MARK) == []
    assert pool.breaker_state("proj-mcp", "secretive") == "closed"


async def test_notify_invalidates_cached_tools_and_sessions(
    pool: McpClientPool,
    http_servers: dict[str, HttpServer],
    db_pool: asyncpg.Pool,
    database_url: str,
) -> None:
    server = http_servers["streamable_http"]
    store = McpServerStore(db_pool)
    config, _ = await store.upsert(server.config("watched"))
    async with Listener(database_url) as listener:
        await pool.listen(listener)
        before = await server.stats()
        tools = await pool.list_tools(config, {})
        assert {t.name for t in tools.tools} >= {"echo", "add", "slow", "env", "fail", "header"}
        assert await pool.list_tools(config, {}) == tools  # from the cache
        assert (await server.stats())["list_tools"] - before["list_tools"] == 1

        calls = (await server.stats())["tool_calls"]
        in_flight = asyncio.create_task(pool.call_tool(config, {}, "slow", {"seconds": 0.5}))

        async def running() -> bool:
            return (await server.stats())["tool_calls"] > calls

        await wait_for(running, "the call to reach the server")
        changed, _ = await store.upsert(dataclasses.replace(config, call_timeout_s=5))
        await wait_for(lambda: not pool.is_connected("proj-mcp", "watched"), "invalidation")
        # The retired session lets the call in flight finish.
        assert structured(await in_flight) == "done"

        cached = await server.stats()
        assert await pool.list_tools(changed, {}) == tools
        after = await server.stats()
        assert after["list_tools"] - cached["list_tools"] == 1
        assert after["initialize"] - cached["initialize"] == 1


async def test_connect_timeout_gives_up_and_leaves_no_process(pool: McpClientPool) -> None:
    # Starts, never answers initialize, exits when its stdin closes.
    silent = McpServerConfig(
        project_id="proj-mcp",
        name="silent",
        transport="stdio",
        command=SILENT[0],
        args=SILENT[1:],
        connect_timeout_s=0.3,
    )
    result = await pool.call_tool(silent, {}, "echo", {"text": "x"})
    assert (result.is_error, result.outcome) == (True, "timeout")
    assert "no session within the connect timeout of 0.3 s" in result.error
    await wait_for(lambda: children("sys.stdin.read") == [], "the silent server to be gone")


async def test_test_server_uses_a_fresh_session_and_closes_it(
    pool: McpClientPool, http_servers: dict[str, HttpServer]
) -> None:
    server = http_servers["sse"]
    before = await server.stats()
    probe = await pool.test_server(server.config("probe"), {})
    assert probe.server_name == "agentfleet-test-server"
    assert "echo" in {t.name for t in probe.tools}
    assert probe.duration_s > 0
    assert (await server.stats())["initialize"] - before["initialize"] == 1
    assert not pool.is_connected("proj-mcp", "probe")


async def test_published_time_server_over_stdio(pool: McpClientPool) -> None:
    config = McpServerConfig(
        project_id="proj-mcp",
        name="time",
        transport="stdio",
        # The venv's console script (its bin folder need not be on PATH).
        command=str(Path(sys.executable).parent / "mcp-server-time"),
    )
    assert children("mcp-server-time") == []
    names = {t.name for t in (await pool.list_tools(config, {})).tools}
    assert {"get_current_time", "convert_time"} <= names
    result = await pool.call_tool(config, {}, "get_current_time", {"timezone": "UTC"})
    assert not result.is_error, result.error
    assert result.result["structured_content"]["timezone"] == "UTC"
    # This server answers an unknown tool with a JSON-RPC error, not an isError result.
    unknown = await pool.call_tool(config, {}, "no_such_tool", {})
    assert (unknown.is_error, unknown.outcome) == (True, "protocol_error")
    assert "no_such_tool" in unknown.error
    assert pool.breaker_state("proj-mcp", "time") == "closed"
    assert len(children("mcp-server-time")) == 1
