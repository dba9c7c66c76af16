"""Service identity with least privilege (issue #15): one credential per service, limited to
the methods that service calls, never passing an admin check, rotatable without downtime.

A stolen executor token reads no history and writes no definitions, servers, secrets or
graphs; a stolen dispatcher token calls no tool and reads no history; a member token uses no
admin method. Each is refused with PERMISSION_DENIED naming the method, and the database is
unchanged afterwards.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import pytest
from google.protobuf import struct_pb2

from agentfleet.auth import TokenStore
from agentfleet.errors import InvalidArgument
from agentfleet.gemini_stub import Call, GeminiStub, Reply, Script
from agentfleet.rpc.clients import TOKEN_FILE_CHECK_INTERVAL_S, TokenFile
from agentfleet.testing import factories as f
from agentfleet.testing.services import Stack, start_stack
from agentfleet.testing.waiting import wait_for
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
    toolpool_pb2,
    toolpool_pb2_grpc,
)

P = "alpha"

Attack = Callable[[Stack, str, str], Any]
"""(stack, token, run id) -> the call (awaitable or stream) an attacker makes."""


def _history(stack: Stack, token: str) -> history_pb2_grpc.HistoryServiceStub:
    return history_pb2_grpc.HistoryServiceStub(stack.channel("history", token=token))


def _registry(stack: Stack, token: str) -> registry_pb2_grpc.AgentRegistryServiceStub:
    return registry_pb2_grpc.AgentRegistryServiceStub(stack.channel("executor", token=token))


def _toolpool(stack: Stack, token: str) -> toolpool_pb2_grpc.ToolPoolServiceStub:
    return toolpool_pb2_grpc.ToolPoolServiceStub(stack.channel("toolpool", token=token))


def _dispatcher(stack: Stack, token: str) -> dispatcher_pb2_grpc.DispatcherServiceStub:
    return dispatcher_pb2_grpc.DispatcherServiceStub(stack.channel("dispatcher", token=token))


def _manifest() -> struct_pb2.Struct:
    manifest = struct_pb2.Struct()
    manifest.update(
        {
            "name": "stolen",
            "version": "1.0.0",
            "agents": [{"name": "evil", "system_prompt": "x", "model": {"name": "m"}}],
        }
    )
    return manifest


ATTACKS: dict[str, Attack] = {
    "ListRuns": lambda s, t, run: _history(s, t).ListRuns(
        history_pb2.ListRunsRequest(project_id=P)
    ),
    "GetRun": lambda s, t, run: _history(s, t).GetRun(
        history_pb2.GetRunRequest(project_id=P, run_id=run)
    ),
    "WatchRun": lambda s, t, run: _history(s, t).WatchRun(
        history_pb2.WatchRunRequest(project_id=P, run_id=run)
    ),
    "UpsertAgentDefinition": lambda s, t, run: _registry(s, t).UpsertAgentDefinition(
        registry_pb2.UpsertAgentDefinitionRequest(
            project_id=P,
            agent_definition=common_pb2.AgentDefinition(
                name="evil", system_prompt="x", model=common_pb2.ModelConfig(name="m")
            ),
        )
    ),
    "InstallProduct": lambda s, t, run: _registry(s, t).InstallProduct(
        registry_pb2.InstallProductRequest(project_id=P, manifest=_manifest())
    ),
    "UpsertMcpServer": lambda s, t, run: _toolpool(s, t).UpsertMcpServer(
        toolpool_pb2.UpsertMcpServerRequest(
            project_id=P,
            mcp_server=toolpool_pb2.McpServer(
                name="evil",
                transport=toolpool_pb2.MCP_TRANSPORT_STREAMABLE_HTTP,
                url="http://127.0.0.1:9/mcp",
            ),
        )
    ),
    "SetSecret": lambda s, t, run: _toolpool(s, t).SetSecret(
        toolpool_pb2.SetSecretRequest(project_id=P, name="STOLEN", value="v")
    ),
    "CreateTaskGraph": lambda s, t, run: _dispatcher(s, t).CreateTaskGraph(
        dispatcher_pb2.CreateTaskGraphRequest(
            project_id=P, tasks=[dispatcher_pb2.TaskSpec(key="a", title="do a")]
        )
    ),
    "CallTool": lambda s, t, run: _toolpool(s, t).CallTool(
        toolpool_pb2.CallToolRequest(
            project_id=P, run_id=run, tool_call_id="c-1", tool_name="create_entity"
        )
    ),
}

REFUSED = [
    *(
        ("executor", name)
        for name in (
            "ListRuns",
            "GetRun",
            "WatchRun",
            "UpsertAgentDefinition",
            "InstallProduct",
            "UpsertMcpServer",
            "SetSecret",
            "CreateTaskGraph",
        )
    ),
    *(("dispatcher", name) for name in ("CallTool", "ListRuns", "GetRun", "WatchRun")),
    *(("toolpool", name) for name in ("CallTool", "GetRun")),
    *(("history", name) for name in ("CallTool", "ListRuns")),
    *(
        ("member", name)
        for name in ("UpsertAgentDefinition", "InstallProduct", "UpsertMcpServer", "SetSecret")
    ),
]


async def database_fingerprint(pool: asyncpg.Pool) -> dict[str, str]:
    """Every kb table's content, hashed: equal fingerprints mean nothing changed."""
    tables = await pool.fetch(
        "SELECT table_name FROM information_schema.tables "
        "WHERE table_schema = 'kb' AND table_type = 'BASE TABLE' ORDER BY table_name"
    )
    fingerprint = {}
    for row in tables:
        fingerprint[row["table_name"]] = await pool.fetchval(
            "SELECT coalesce(md5(string_agg(t::text, ',' ORDER BY t::text)), '') "
            f'FROM kb."{row["table_name"]}" t'
        )
    return fingerprint


async def status_of(call: Any) -> grpc.aio.AioRpcError | None:
    try:
        if hasattr(call, "__aiter__"):
            async for _ in call:
                pass
        else:
            await call
    except grpc.aio.AioRpcError as exc:
        return exc
    return None


@pytest.mark.parametrize(("who", "method"), REFUSED)
async def test_a_stolen_credential_is_refused_and_changes_nothing(
    stack: Stack, db_pool: asyncpg.Pool, who: str, method: str
) -> None:
    if who == "member":
        token = await stack.create_token(P, "member")
    else:
        token = stack.service_tokens[who]
    run = await f.insert_run(db_pool, project_id=P, agent_name="a", status="running")
    before = await database_fingerprint(db_pool)

    error = await status_of(ATTACKS[method](stack, token, str(run["id"])))

    assert error is not None, f"{who} could call {method}"
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED, error.details()
    assert method in (error.details() or "")
    assert await database_fingerprint(db_pool) == before


async def test_service_tokens_never_pass_an_admin_check(stack: Stack) -> None:
    """Not even the dispatcher's, whose methods are on the executor next to the registry."""
    for who in ("executor", "dispatcher", "toolpool", "history"):
        call = ATTACKS["UpsertAgentDefinition"](stack, stack.service_tokens[who], "")
        error = await status_of(call)
        assert error is not None, who
        assert error.code() == grpc.StatusCode.PERMISSION_DENIED, who


async def test_each_service_token_may_call_its_own_methods_for_any_project(
    stack: Stack, db_pool: asyncpg.Pool
) -> None:
    executor = _toolpool(stack, stack.service_tokens["executor"])
    for project in ("alpha", "beta"):
        await executor.ResolveTools(
            toolpool_pb2.ResolveToolsRequest(project_id=project, patterns=["*"])
        )
    dispatcher = executor_pb2_grpc.ExecutorServiceStub(
        stack.channel("executor", token=stack.service_tokens["dispatcher"])
    )
    error = await status_of(
        dispatcher.CancelRun(
            executor_pb2.CancelRunRequest(
                project_id="beta", run_id="00000000-0000-0000-0000-000000000000"
            )
        )
    )
    # Past the interceptor: the run does not exist.
    assert error is not None
    assert error.code() == grpc.StatusCode.NOT_FOUND, error.details()


async def test_a_service_token_must_name_its_service(db_pool: asyncpg.Pool) -> None:
    store = TokenStore(db_pool)
    with pytest.raises(InvalidArgument, match="service: a service token must name one of"):
        await store.create(project_id=None, role="service")
    with pytest.raises(InvalidArgument, match="service: a service token must name one of"):
        await store.create(project_id=None, role="service", service="admin")
    with pytest.raises(InvalidArgument, match="only service tokens name a service"):
        await store.create(project_id=P, role="admin", service="executor")
    # The database says so too, whatever writes the row.
    with pytest.raises(asyncpg.CheckViolationError):
        await db_pool.execute(
            "INSERT INTO kb.api_tokens (token_hash, role) VALUES (repeat('a', 64), 'service')"
        )


# --- rotation without downtime ----------------------------------------------------------


def write_atomically(path: Path, text: str) -> None:
    """As a Kubernetes Secret volume does: a new file swapped in, never a half-written one."""
    staged = path.with_suffix(".new")
    staged.write_text(text)
    os.replace(staged, path)


def test_a_token_file_is_reread_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("af_one\n")
    now = [100.0]
    source = TokenFile(path, clock=lambda: now[0])
    assert source.current() == "af_one"
    write_atomically(path, "af_two")
    assert source.current() == "af_one"  # checked at most once per interval
    now[0] += TOKEN_FILE_CHECK_INTERVAL_S
    assert source.current() == "af_two"
    path.unlink()  # mid-update: the last token stands
    now[0] += TOKEN_FILE_CHECK_INTERVAL_S
    assert source.current() == "af_two"


async def test_rotating_the_executors_token_file_under_load_loses_no_call(
    database_url: str, db_pool: asyncpg.Pool, gemini_stub: GeminiStub, tmp_path: Path
) -> None:
    store = TokenStore(db_pool)
    old = await store.create(project_id=None, role="service", service="executor", name="old")
    token_file = tmp_path / "executor-token"
    write_atomically(token_file, old.token)
    stack = await start_stack(
        database_url=database_url,
        pool=db_pool,
        environ={
            "AGENTFLEET_GEMINI_BASE_URL": gemini_stub.base_url or "",
            "AGENTFLEET_TOKEN_CACHE_TTL_S": "0.2",
        },
        service_environ={"executor": {"AGENTFLEET_SERVICE_TOKEN_FILE": str(token_file)}},
    )
    try:
        gemini_stub.add_script(
            Script(
                name="writer",
                per_conversation=True,
                replies=[
                    Reply(calls=[Call("create_entity", {"type": "Note", "properties": {}})]),
                    Reply(text="written"),
                ],
            )
        )
        admin = await stack.create_token(P, "admin")
        await _registry(stack, admin).UpsertAgentDefinition(
            registry_pb2.UpsertAgentDefinitionRequest(
                project_id=P,
                agent_definition=common_pb2.AgentDefinition(
                    name="writer",
                    system_prompt="You write.",
                    model=common_pb2.ModelConfig(name="gemini-test"),
                    tools=["create_entity"],
                ),
            )
        )
        executor = executor_pb2_grpc.ExecutorServiceStub(stack.channel("executor", token=admin))

        async def run_once() -> None:
            request = executor_pb2.StartRunRequest(project_id=P, agent_name="writer", input="go")
            [_ async for _ in executor.StartRun(request, timeout=30)]

        stop = asyncio.Event()

        async def keep_running() -> int:
            count = 0
            while not stop.is_set():
                await run_once()
                count += 1
            return count

        load = asyncio.create_task(keep_running())
        new = await store.create(project_id=None, role="service", service="executor", name="new")
        write_atomically(token_file, new.token)
        # The operator's "wait": the documented bound for a changed file to be in use.
        await asyncio.sleep(TOKEN_FILE_CHECK_INTERVAL_S + 0.5)
        assert await store.revoke(old.token_id)
        await _until_refused(stack, old.token)
        await run_once()  # after the revocation, on the new token alone
        stop.set()
        assert await asyncio.wait_for(load, 60) >= 1
    finally:
        await stack.close()

    runs = await db_pool.fetch("SELECT status, error_message FROM kb.agent_runs")
    assert runs
    assert all(r["status"] == "completed" for r in runs), runs
    calls = await db_pool.fetch("SELECT status, error FROM kb.agent_run_tool_calls")
    assert len(calls) == len(runs)
    assert all(c["status"] == "completed" for c in calls), calls


async def _until_refused(stack: Stack, token: str, timeout_s: float = 10.0) -> None:
    """Waits until the toolpool refuses ``token`` (its verdict cache has expired)."""
    toolpool = _toolpool(stack, token)

    async def refused() -> bool:
        request = toolpool_pb2.ResolveToolsRequest(project_id=P)
        error = await status_of(toolpool.ResolveTools(request))
        return error is not None and error.code() == grpc.StatusCode.UNAUTHENTICATED

    await wait_for(refused, "the revoked token to be refused", timeout_s=timeout_s)
