"""ToolPoolService over real gRPC: catalog, resolution, CallTool whitelists, MCP servers."""

import datetime
import sys
import time
import uuid
from pathlib import Path

import asyncpg
import grpc
import pytest
from google.protobuf import json_format, struct_pb2
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentfleet.mcp.config import HIDDEN_VALUE
from agentfleet.testing.services import Stack, start_stack
from agentfleet.v1 import common_pb2, toolpool_pb2, toolpool_pb2_grpc

TEST_SERVER = str(Path(__file__).parents[2] / "examples" / "mcp" / "test_server" / "server.py")
SPAWN = {"list_available_agents", "spawn_agents"}


@pytest.fixture
async def toolpool_stack(database_url: str, db_pool: asyncpg.Pool):  # type: ignore[no-untyped-def]
    stack = await start_stack(database_url=database_url, pool=db_pool, names=("toolpool",))
    try:
        yield stack
    finally:
        await stack.close()


async def _client(stack: Stack, project: str, role: str = "admin"):  # type: ignore[no-untyped-def]
    token = await stack.create_token(project, role=role)
    return toolpool_pb2_grpc.ToolPoolServiceStub(stack.channel("toolpool", token=token))


def _executor(stack: Stack):  # type: ignore[no-untyped-def]
    """The toolpool as the executor calls it: CallTool takes only the executor's identity."""
    return toolpool_pb2_grpc.ToolPoolServiceStub(
        stack.channel("toolpool", token=stack.service_tokens["executor"])
    )


async def make_run(
    pool: asyncpg.Pool, project: str, tools: list[str], *, depth: int = 0, status: str = "running"
) -> str:
    """A definition with whitelist ``tools`` and one of its runs (the executor's rows)."""
    name = f"agent-{uuid.uuid4().hex[:8]}"
    definition_id = await pool.fetchval(
        "INSERT INTO kb.agent_definitions (project_id, name, tools) VALUES ($1, $2, $3) "
        "RETURNING id",
        project,
        name,
        tools,
    )
    parent = None
    root = None
    for level in range(depth + 1):
        run_id = await pool.fetchval(
            """INSERT INTO kb.agent_runs (project_id, agent_definition_id, agent_name, status,
                   input, parent_run_id, root_run_id, depth, lease_owner, lease_expires_at,
                   started_at)
               VALUES ($1, $2, $3, $4, 'x', $5, $6, $7, 'test', now() + interval '1 hour', now())
               RETURNING id""",
            project,
            definition_id,
            name,
            status if level == depth else "running",
            parent,
            root,
            level,
        )
        root = root or run_id
        parent = run_id
    return str(parent)


def _args(**values: object) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(values)
    return struct


def call_request(
    project: str, run_id: str, tool: str, **args: object
) -> toolpool_pb2.CallToolRequest:
    """A CallTool request of ``tool`` for the run, with a new tool_call_id."""
    return toolpool_pb2.CallToolRequest(
        project_id=project,
        run_id=run_id,
        tool_call_id=f"call-{uuid.uuid4().hex[:6]}",
        tool_name=tool,
        arguments=_args(**args),
    )


async def _call(stub, project: str, run_id: str, tool: str, **args: object):  # type: ignore[no-untyped-def]
    return await stub.CallTool(call_request(project, run_id, tool, **args))


async def _code(call) -> grpc.StatusCode:  # type: ignore[no-untyped-def]
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return caught.value.code()


async def test_catalog_lists_builtin_and_coordination_tools(toolpool_stack: Stack) -> None:
    stub = await _client(toolpool_stack, "alpha")
    names: list[str] = []
    token = ""
    while True:
        page = await stub.ListTools(
            toolpool_pb2.ListToolsRequest(project_id="alpha", page_size=5, page_token=token)
        )
        names += [t.name for t in page.tools]
        token = page.next_page_token
        if not token:
            break
    assert names == sorted(names)
    assert len(names) == len(set(names))
    assert {"create_entity", "search_hybrid", "create_subtasks"} <= set(names)
    assert SPAWN | {"exit_loop"} <= set(names)
    executor_only = await stub.ListTools(
        toolpool_pb2.ListToolsRequest(
            project_id="alpha", source_kind=common_pb2.TOOL_SOURCE_KIND_EXECUTOR
        )
    )
    assert {t.name for t in executor_only.tools} == SPAWN | {"exit_loop"}
    assert all(t.executed_by == toolpool_pb2.TOOL_EXECUTOR_EXECUTOR for t in executor_only.tools)


async def test_resolution_applies_globs_and_depth_rules(toolpool_stack: Stack) -> None:
    stub = await _client(toolpool_stack, "alpha")

    async def resolve(patterns: list[str], depth: int) -> set[str]:
        reply = await stub.ResolveTools(
            toolpool_pb2.ResolveToolsRequest(project_id="alpha", patterns=patterns, depth=depth)
        )
        return {t.name for t in reply.tools}

    assert await resolve([], 0) == set()
    assert await resolve(["search_*"], 0) == {"search_fts", "search_hybrid"}
    assert await resolve(["*"], 0) >= SPAWN
    assert not SPAWN & await resolve(["*"], 1)
    assert await resolve(["*", *SPAWN], 1) >= SPAWN
    assert not SPAWN & await resolve(["*", *SPAWN], 2)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await resolve(["get_entity", "web__nope"], 0)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    assert "web__nope" in (caught.value.details() or "")


async def test_calltool_runs_builtin_tools_in_the_runs_project(
    toolpool_stack: Stack, spans: InMemorySpanExporter
) -> None:
    stub = _executor(toolpool_stack)
    run_id = await make_run(toolpool_stack.pool, "alpha", ["create_entity", "get_*"])
    created = await _call(
        stub,
        "alpha",
        run_id,
        "create_entity",
        type="Note",
        properties={"title": "hello"},
        project_id="beta",  # never chooses the project
    )
    assert not created.is_error, created.error_message
    entity = json_format.MessageToDict(created.result)
    entity_id = entity.get("id") or entity["entity"]["id"]
    stored = await toolpool_stack.pool.fetchval(
        "SELECT project_id FROM kb.graph_objects WHERE id = $1::uuid", entity_id
    )
    assert stored == "alpha"
    assert created.source.kind == common_pb2.TOOL_SOURCE_KIND_BUILTIN
    fetched = await _call(stub, "alpha", run_id, "get_entity", id=entity_id)
    assert not fetched.is_error
    tool_spans = [s for s in spans.get_finished_spans() if s.name == "execute_tool create_entity"]
    assert len(tool_spans) == 1
    assert tool_spans[0].attributes["agentfleet.tool.source"] == "builtin"
    assert tool_spans[0].attributes["agentfleet.tool.outcome"] == "ok"


async def test_calltool_refuses_tools_outside_the_whitelist(toolpool_stack: Stack) -> None:
    run_id = await make_run(toolpool_stack.pool, "alpha", ["get_*"])
    # The executor's identity may call any project's tools, but not widen a run's whitelist.
    call = _call(_executor(toolpool_stack), "alpha", run_id, "create_entity", type="Note")
    assert await _code(call) == grpc.StatusCode.PERMISSION_DENIED
    assert await toolpool_stack.pool.fetchval("SELECT count(*) FROM kb.graph_objects") == 0


@pytest.mark.parametrize("role", ["admin", "member"])
async def test_a_project_token_cannot_call_tools(toolpool_stack: Stack, role: str) -> None:
    """CallTool runs a tool inside a run, for the run's loop: a tenant calling it directly
    would skip the run's approvals, doom-loop check and tool-call record."""
    stub = await _client(toolpool_stack, "alpha", role=role)
    run_id = await make_run(toolpool_stack.pool, "alpha", ["*"])
    call = _call(stub, "alpha", run_id, "create_entity", type="Note", properties={})
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "CallTool is called by the executor" in (caught.value.details() or "")
    assert await toolpool_stack.pool.fetchval("SELECT count(*) FROM kb.graph_objects") == 0


async def test_spawn_tools_follow_the_depth_rules_at_call_time(toolpool_stack: Stack) -> None:
    stub = _executor(toolpool_stack)
    at_one = await make_run(toolpool_stack.pool, "alpha", ["*"], depth=1)
    assert await _code(_call(stub, "alpha", at_one, "spawn_agents", tasks=[])) == (
        grpc.StatusCode.PERMISSION_DENIED
    )
    named = await make_run(toolpool_stack.pool, "alpha", ["spawn_agents"], depth=1)
    # Allowed at depth 1 when named exactly, but run by the executor, never here.
    assert await _code(_call(stub, "alpha", named, "spawn_agents", tasks=[])) == (
        grpc.StatusCode.FAILED_PRECONDITION
    )


async def test_calltool_bad_input(toolpool_stack: Stack) -> None:
    stub = _executor(toolpool_stack)
    run_id = await make_run(toolpool_stack.pool, "alpha", ["*"])
    assert await _code(_call(stub, "alpha", run_id, "no_such_tool")) == grpc.StatusCode.NOT_FOUND
    bad = await _call(stub, "alpha", run_id, "create_entity", properties={"title": "x"})
    assert bad.is_error
    assert "type" in bad.error_message
    huge = _call(stub, "alpha", run_id, "create_entity", type="T", properties={"x": "y" * 300_000})
    assert await _code(huge) == grpc.StatusCode.INVALID_ARGUMENT
    assert await toolpool_stack.pool.fetchval("SELECT count(*) FROM kb.graph_objects") == 0
    not_a_run = _call(stub, "alpha", "not-a-uuid", "get_entity", id="x")
    assert await _code(not_a_run) == grpc.StatusCode.INVALID_ARGUMENT
    finished = await make_run(toolpool_stack.pool, "alpha", ["*"], status="queued")
    assert await _code(_call(stub, "alpha", finished, "get_entity", id="x")) == (
        grpc.StatusCode.FAILED_PRECONDITION
    )


async def test_another_projects_run_is_not_found(toolpool_stack: Stack) -> None:
    beta_run = await make_run(toolpool_stack.pool, "beta", ["*"])
    call = _call(_executor(toolpool_stack), "alpha", beta_run, "create_entity", type="Note")
    assert await _code(call) == grpc.StatusCode.NOT_FOUND
    assert await toolpool_stack.pool.fetchval("SELECT count(*) FROM kb.graph_objects") == 0


def _stdio_server(name: str, **extra: object) -> toolpool_pb2.McpServer:
    return toolpool_pb2.McpServer(
        name=name,
        transport=toolpool_pb2.MCP_TRANSPORT_STDIO,
        command=sys.executable,
        args=[TEST_SERVER, "--transport", "stdio"],
        **extra,  # type: ignore[arg-type]
    )


async def test_mcp_servers_join_the_catalog_and_calls(toolpool_stack: Stack) -> None:
    stub = await _client(toolpool_stack, "alpha")
    await stub.SetSecret(
        toolpool_pb2.SetSecretRequest(project_id="alpha", name="GREETING", value="s3cr3t")
    )
    saved = await stub.UpsertMcpServer(
        toolpool_pb2.UpsertMcpServerRequest(
            project_id="alpha", mcp_server=_stdio_server("test", env={"GREETING": "${GREETING}"})
        )
    )
    assert saved.created
    assert saved.mcp_server.env["GREETING"] == "${GREETING}"  # as configured, never resolved
    tools = await stub.ListTools(
        toolpool_pb2.ListToolsRequest(project_id="alpha", mcp_server="test")
    )
    assert {"test__echo", "test__env", "test__slow"} <= {t.name for t in tools.tools}
    assert all(t.source.mcp_server == "test" for t in tools.tools)

    run_id = await make_run(toolpool_stack.pool, "alpha", ["test__*"])
    executor = _executor(toolpool_stack)
    echoed = await _call(executor, "alpha", run_id, "test__echo", text="hi")
    assert not echoed.is_error, echoed.error_message
    assert "hi" in json_format.MessageToJson(echoed.result)
    env = await _call(executor, "alpha", run_id, "test__env", name="GREETING")
    assert "s3cr3t" in json_format.MessageToJson(env.result)
    # The tool's own error result is an answer; a call the server never answered failed.
    tool_error = await _call(executor, "alpha", run_id, "test__fail")
    assert (tool_error.is_error, tool_error.failed) == (True, False)
    cut = call_request("alpha", run_id, "test__slow", seconds=30)
    cut.timeout.FromTimedelta(datetime.timedelta(seconds=0.5))
    timed_out = await executor.CallTool(cut)
    assert (timed_out.is_error, timed_out.failed) == (True, True)
    assert json_format.MessageToDict(timed_out.result) == {"error": timed_out.error_message}

    secrets = await stub.ListSecrets(toolpool_pb2.ListSecretsRequest(project_id="alpha"))
    assert [s.name for s in secrets.secrets] == ["GREETING"]
    assert "s3cr3t" not in str(secrets)

    probe = await stub.TestMcpServer(
        toolpool_pb2.TestMcpServerRequest(project_id="alpha", name="test")
    )
    assert probe.ok, probe.error
    assert "test__echo" in {t.name for t in probe.tools}

    await stub.DeleteMcpServer(toolpool_pb2.DeleteMcpServerRequest(project_id="alpha", name="test"))
    tools = await stub.ListTools(
        toolpool_pb2.ListToolsRequest(project_id="alpha", mcp_server="test")
    )
    assert list(tools.tools) == []


async def test_testing_a_server_says_how_long_the_probe_took(toolpool_stack: Stack) -> None:
    """`agentfleet mcp test` printed "2 tools in " with no time: duration was never set."""
    stub = await _client(toolpool_stack, "alpha")
    await stub.UpsertMcpServer(
        toolpool_pb2.UpsertMcpServerRequest(project_id="alpha", mcp_server=_stdio_server("t"))
    )
    started = time.monotonic()
    probe = await stub.TestMcpServer(
        toolpool_pb2.TestMcpServerRequest(project_id="alpha", name="t")
    )
    elapsed = time.monotonic() - started
    assert probe.ok, probe.error
    assert probe.HasField("duration")
    # Spawning a Python MCP server and listing its tools takes well over a millisecond;
    # the probe is part of the call, so it cannot have taken longer than the call.
    assert 0.001 < probe.duration.ToTimedelta().total_seconds() <= elapsed


async def test_malformed_and_clashing_servers_are_refused(toolpool_stack: Stack) -> None:
    stub = await _client(toolpool_stack, "alpha")
    bad = toolpool_pb2.McpServer(name="Bad Name!", transport=toolpool_pb2.MCP_TRANSPORT_SSE)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.UpsertMcpServer(
            toolpool_pb2.UpsertMcpServerRequest(project_id="alpha", mcp_server=bad)
        )
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "mcp_server.name" in (caught.value.details() or "")
    assert "mcp_server.url" in (caught.value.details() or "")
    no_transport = toolpool_pb2.McpServer(name="x", command="y")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.UpsertMcpServer(
            toolpool_pb2.UpsertMcpServerRequest(project_id="alpha", mcp_server=no_transport)
        )
    assert "mcp_server.transport" in (caught.value.details() or "")

    await stub.UpsertMcpServer(
        toolpool_pb2.UpsertMcpServerRequest(
            project_id="alpha", mcp_server=_stdio_server("one", tool_prefix="t_")
        )
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.UpsertMcpServer(
            toolpool_pb2.UpsertMcpServerRequest(
                project_id="alpha", mcp_server=_stdio_server("two", tool_prefix="t_")
            )
        )
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "mcp_server.tool_prefix" in (caught.value.details() or "")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.UpsertMcpServer(
            toolpool_pb2.UpsertMcpServerRequest(
                project_id="alpha", mcp_server=_stdio_server("9lives")
            )
        )
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "not valid function names" in (caught.value.details() or "")
    names = await toolpool_stack.pool.fetch("SELECT name FROM kb.mcp_servers ORDER BY name")
    assert [r["name"] for r in names] == ["one"]


async def test_members_cannot_change_servers_or_secrets(toolpool_stack: Stack) -> None:
    stub = await _client(toolpool_stack, "alpha", role="member")
    call = stub.SetSecret(toolpool_pb2.SetSecretRequest(project_id="alpha", name="K", value="v"))
    assert await _code(call) == grpc.StatusCode.PERMISSION_DENIED
    listed = await stub.ListSecrets(toolpool_pb2.ListSecretsRequest(project_id="alpha"))
    assert list(listed.secrets) == []
    # Testing a server starts it with the project's secrets: an administrator's act too.
    probe = stub.TestMcpServer(
        toolpool_pb2.TestMcpServerRequest(project_id="alpha", mcp_server=_stdio_server("t"))
    )
    assert await _code(probe) == grpc.StatusCode.PERMISSION_DENIED


async def test_members_read_no_literal_mcp_setting(toolpool_stack: Stack) -> None:
    """Credentials belong in secrets (${NAME}); a literal an admin typed into a server's env
    is hidden from members, who may list the project's servers."""
    admin = await _client(toolpool_stack, "alpha")
    env = {"API_KEY": "sk-typed-by-hand", "GREETING": "${GREETING}"}
    await admin.UpsertMcpServer(
        toolpool_pb2.UpsertMcpServerRequest(
            project_id="alpha", mcp_server=_stdio_server("typed", env=env)
        )
    )
    request = toolpool_pb2.ListMcpServersRequest(project_id="alpha")
    member = await _client(toolpool_stack, "alpha", role="member")
    (seen,) = (await member.ListMcpServers(request)).mcp_servers
    assert dict(seen.env) == {"API_KEY": HIDDEN_VALUE, "GREETING": "${GREETING}"}
    (full,) = (await admin.ListMcpServers(request)).mcp_servers
    assert dict(full.env) == env
