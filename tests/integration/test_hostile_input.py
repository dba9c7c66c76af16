"""Hostile input, property-based: hypothesis generates requests for every RPC of the
executor (ExecutorService, AgentRegistryService), toolpool, history and dispatcher
services — empty and huge strings, NUL bytes and other unicode edge cases, negative and
extreme numbers and durations, out-of-range timestamps and enum values, garbage and forged
page tokens, bad globs, random and too-deeply-nested Structs, malformed manifests, task DAGs
with bad keys and edges. For every example: the status is never UNKNOWN or INTERNAL (OK is
fine where the request is valid), the services still answer health SERVING, and
:func:`check_invariants` holds.

How hypothesis meets asyncio here: pytest-asyncio (1.x) runs a ``@given``-decorated
``async def`` test natively — it substitutes hypothesis' inner test with a wrapper that
awaits each example in the test's own event loop (the session loop of this suite). So the
function-scoped ``hostile`` fixture (services, database, stub model) is built once per test
and shared by all of that test's examples, which is the point: one server must survive
every example. Hypothesis warns about function-scoped fixtures under ``@given`` for exactly
that sharing, so that health check is suppressed on purpose. ``deadline=None`` because a
gRPC round trip (or a run streamed to its end) has no stable latency; ``derandomize=True``
and ``database=None`` make CI runs reproducible and leave no ``.hypothesis`` folder.
``max_examples`` keeps the whole file to a few seconds per service.
"""

from __future__ import annotations

import string
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import asyncpg
import grpc
import pytest
from google.protobuf import duration_pb2, struct_pb2, timestamp_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentfleet.gemini_stub import GeminiStub, Reply, Script
from agentfleet.postgres.pagination import encode_page_token
from agentfleet.testing.checks.invariants import check_invariants
from agentfleet.testing.services import Stack, start_stack
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
from services.history.models import RunFilters

P = "hostile"
BAD = {grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL}
EXAMPLES = settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# -- strategies ------------------------------------------------------------------------

SPECIAL_TEXT = [
    "",
    " ",
    "\x00",
    "a\x00b",
    "\u202e\u200b\ufeff",
    "🙂" * 300,
    "x" * 70_000,
    "' OR 1=1 --",
    "../../etc/passwd",
    "${SECRET}",
    "%s%n",
    "*",
    "[",
    "[!",
    "**/[a-",
    "helper",
    "00000000-0000-0000-0000-000000000000",
    "not-a-uuid",
]
texts = st.one_of(
    st.sampled_from(SPECIAL_TEXT),
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=40),
)
names = st.one_of(texts, st.sampled_from(["helper", "create_entity", "get_*", "GREETING"]))
int32 = st.one_of(
    st.sampled_from([0, -1, 1, -(2**31), 2**31 - 1]), st.integers(-(2**31), 2**31 - 1)
)
int64 = st.one_of(st.sampled_from([0, -1, -(2**63), 2**63 - 1]), st.integers(-(2**63), 2**63 - 1))
enums = st.one_of(st.integers(0, 8), int32)
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False),
    # NaN and the infinities are not JSON: every request refuses them (request_checks).
    st.sampled_from([1e308, -1e308, 2**53 + 1, float("nan"), float("inf"), float("-inf")]),
    texts,
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(texts, inner, max_size=4)),
    max_leaves=12,
)


def nested(depth: int) -> dict[str, Any]:
    """A dict ``depth`` levels deep; each level is 3 protobuf levels (Struct, entry, Value),
    so depths past ~33 exceed protobuf's recursion limit of 100."""
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(depth):
        value = {"k": value}
    return value


json_objects = st.one_of(
    st.dictionaries(texts, json_values, max_size=5),
    st.integers(1, 25).map(nested),
    st.just({"big": "y" * 300_000}),
)


@st.composite
def structs(draw: st.DrawFn) -> struct_pb2.Struct:
    message = struct_pb2.Struct()
    message.update(draw(json_objects))
    return message


@st.composite
def durations(draw: st.DrawFn) -> duration_pb2.Duration:
    seconds = draw(st.one_of(st.sampled_from([0, -1, 1, 315_576_000_000, -315_576_000_001]), int64))
    nanos = draw(st.one_of(st.just(0), st.integers(-(10**9), 10**9), int32))
    return duration_pb2.Duration(seconds=seconds, nanos=nanos)


@st.composite
def timestamps(draw: st.DrawFn) -> timestamp_pb2.Timestamp:
    seconds = draw(st.one_of(st.sampled_from([0, -62_135_596_801, 253_402_300_800]), int64))
    return timestamp_pb2.Timestamp(seconds=seconds, nanos=draw(st.integers(-(10**9), 10**9)))


def forged_run_token(position: list[Any]) -> str:
    """A well-formed ListRuns token of this project's unfiltered listing, with any position."""
    return encode_page_token(position, RunFilters(project_id=P).digest_fields())


page_tokens = st.one_of(
    texts,
    st.text(string.ascii_letters + string.digits + "-_=", max_size=60),
    st.lists(json_scalars, max_size=3).map(forged_run_token),
    st.sampled_from(["e30", "W10", "eyJwIjpbXSwiZiI6IiJ9", "=" * 3000]),
)


def optional(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), strategy)


def message(cls: type, **fields: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``cls(**fields)`` leaving out the fields drawn as None (proto3 "not set")."""
    return st.fixed_dictionaries({k: optional(v) for k, v in fields.items()}).map(
        lambda values: cls(**{k: v for k, v in values.items() if v is not None})
    )


# -- the services under attack ----------------------------------------------------------


@dataclass(kw_only=True, slots=True)
class Hostile:
    stack: Stack
    token: str
    run_id: str
    """A finished run of project P, so ids sometimes hit something real."""

    def stub(self, factory: Any, service: str) -> Any:
        return factory(self.stack.channel(service, token=self.token))


@pytest.fixture
async def hostile(
    database_url: str, db_pool: asyncpg.Pool, gemini_stub: GeminiStub
) -> AsyncIterator[Hostile]:
    gemini_stub.add_script(Script(name="default", policy=lambda _request: Reply(text="ok")))
    stack = await start_stack(
        database_url=database_url,
        pool=db_pool,
        environ={"AGENTFLEET_GEMINI_BASE_URL": gemini_stub.base_url or ""},
        names=("toolpool", "history", "executor", "dispatcher"),
    )
    try:
        token = await stack.create_token(P, "admin")
        registry = registry_pb2_grpc.AgentRegistryServiceStub(
            stack.channel("executor", token=token)
        )
        await registry.UpsertAgentDefinition(
            registry_pb2.UpsertAgentDefinitionRequest(
                project_id=P,
                agent_definition=common_pb2.AgentDefinition(
                    name="helper",
                    model=common_pb2.ModelConfig(name="gemini-test"),
                    tools=["get_*"],
                ),
            )
        )
        executor = executor_pb2_grpc.ExecutorServiceStub(stack.channel("executor", token=token))
        events = executor.StartRun(
            executor_pb2.StartRunRequest(project_id=P, agent_name="helper", input="hi"),
            timeout=30,
        )
        run_id = [e async for e in events][-1].run_id
        yield Hostile(stack=stack, token=token, run_id=run_id)
    finally:
        await stack.close()


async def attack(hostile: Hostile, call: Any) -> grpc.StatusCode:
    """Sends one hostile call and checks the answer, the server and the database."""
    code, details = grpc.StatusCode.OK, ""
    try:
        if hasattr(call, "__aiter__"):
            async for _ in call:
                pass
        else:
            await call
    except grpc.aio.AioRpcError as exc:
        code, details = exc.code(), exc.details()
    assert code not in BAD, f"{code.name}: {details}"
    for service in ("executor", "toolpool", "history", "dispatcher"):
        health = health_pb2_grpc.HealthStub(hostile.stack.channel(service))
        reply = await health.Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
    assert await check_invariants(hostile.stack.pool) == []
    return code


def ids(hostile_run: str) -> st.SearchStrategy[str]:
    return st.one_of(texts, st.just(hostile_run), st.uuids().map(str))


# -- ExecutorService ---------------------------------------------------------------------

start_requests = message(
    executor_pb2.StartRunRequest,
    agent_name=names,
    input=texts,
    max_steps=int32,
    timeout=durations(),
    labels=st.dictionaries(texts, texts, max_size=3),
    request_id=texts,
    task_id=texts,
    max_tree_cost_nanos=int64,
)


@given(data=st.data())
@EXAMPLES
async def test_executor_rpcs(hostile: Hostile, data: st.DataObject) -> None:
    stub = hostile.stub(executor_pb2_grpc.ExecutorServiceStub, "executor")
    rpc = data.draw(
        st.sampled_from(["StartRun", "TriggerRun", "CancelRun", "ResumeRun", "DecideToolCall"])
    )
    if rpc in ("StartRun", "TriggerRun"):
        request = data.draw(start_requests)
    elif rpc == "CancelRun":
        request = data.draw(
            message(executor_pb2.CancelRunRequest, run_id=ids(hostile.run_id), reason=texts)
        )
    elif rpc == "DecideToolCall":
        request = data.draw(
            message(
                executor_pb2.DecideToolCallRequest,
                run_id=ids(hostile.run_id),
                tool_call_id=texts,
                decision=st.integers(-5, 5),
                reason=texts,
                arguments=structs(),
                request_id=texts,
            )
        )
    else:
        request = data.draw(
            message(
                executor_pb2.ResumeRunRequest,
                run_id=ids(hostile.run_id),
                input=texts,
                max_steps=int32,
                timeout=durations(),
                request_id=texts,
            )
        )
    request.project_id = P
    await attack(hostile, getattr(stub, rpc)(request, timeout=30))


# -- AgentRegistryService ------------------------------------------------------------------

definitions = message(
    common_pb2.AgentDefinition,
    name=names,
    description=texts,
    system_prompt=texts,
    model=message(
        common_pb2.ModelConfig,
        provider=texts,
        name=names,
        temperature=st.floats(allow_nan=True, width=32),
        max_output_tokens=int32,
        extra=structs(),
    ),
    tools=st.lists(names, max_size=4),
    flow_type=enums,
    sub_agents=st.lists(names, max_size=3),
    max_iterations=int32,
    max_steps=int32,
    default_timeout=durations(),
    visibility=enums,
    tags=st.lists(texts, max_size=3),
    trigger=texts,
    config=structs(),
)
manifest_agents = st.fixed_dictionaries(
    {"name": names, "model": st.fixed_dictionaries({"name": names})},
    optional={"tools": st.lists(names, max_size=3), "flow_type": texts, "max_steps": json_values},
)
manifests = st.one_of(
    json_objects,
    st.fixed_dictionaries(
        {"name": names, "version": texts},
        optional={
            "agents": st.one_of(st.lists(manifest_agents, max_size=3), json_values),
            "mcp_servers": st.lists(st.dictionaries(texts, json_values, max_size=4), max_size=2),
            "description": texts,
        },
    ),
)


@st.composite
def manifest_structs(draw: st.DrawFn) -> struct_pb2.Struct:
    document = struct_pb2.Struct()
    document.update(draw(manifests))
    return document


@given(data=st.data())
@EXAMPLES
async def test_registry_rpcs(hostile: Hostile, data: st.DataObject) -> None:
    stub = hostile.stub(registry_pb2_grpc.AgentRegistryServiceStub, "executor")
    requests = {
        "InstallProduct": message(
            registry_pb2.InstallProductRequest,
            manifest=manifest_structs(),
            request_id=texts,
            validate_only=st.booleans(),
        ),
        "UninstallProduct": message(registry_pb2.UninstallProductRequest, product_name=names),
        "ListProducts": message(
            registry_pb2.ListProductsRequest, page_size=int32, page_token=page_tokens
        ),
        "ListAgentDefinitions": message(
            registry_pb2.ListAgentDefinitionsRequest,
            page_size=int32,
            page_token=page_tokens,
            visibilities=st.lists(enums, max_size=3),
            product_name=names,
        ),
        "GetAgentDefinition": message(registry_pb2.GetAgentDefinitionRequest, name=names),
        "UpsertAgentDefinition": message(
            registry_pb2.UpsertAgentDefinitionRequest,
            agent_definition=definitions,
            expected_version=int32,
            validate_only=st.booleans(),
        ),
        "DeleteAgentDefinition": message(registry_pb2.DeleteAgentDefinitionRequest, name=names),
        "SetProjectBudget": message(
            registry_pb2.SetProjectBudgetRequest,
            budget=message(
                registry_pb2.ProjectBudget,
                daily_tokens=int64,
                monthly_tokens=int64,
                daily_cost_nanos=int64,
                monthly_cost_nanos=int64,
                warn_fraction=st.floats(allow_nan=True, allow_infinity=True),
            ),
        ),
        "GetProjectBudget": message(registry_pb2.GetProjectBudgetRequest),
    }
    rpc = data.draw(st.sampled_from(sorted(requests)))
    request = data.draw(requests[rpc])
    request.project_id = P
    await attack(hostile, getattr(stub, rpc)(request, timeout=30))


# -- ToolPoolService -----------------------------------------------------------------------

# Commands and URLs that fail fast: a hostile test must never start a real program or wait
# on a black hole.
commands = st.sampled_from(["", "\x00", "/nonexistent/mcp-server", "x" * 5000, "does not exist"])
urls = st.sampled_from(
    ["", "\x00", "http://127.0.0.1:1/mcp", "ftp://x", "http://[::1", "javascript:alert(1)"]
)
mcp_servers = message(
    toolpool_pb2.McpServer,
    name=names,
    transport=enums,
    command=commands,
    args=st.lists(texts, max_size=3),
    env=st.dictionaries(texts, texts, max_size=3),
    url=urls,
    headers=st.dictionaries(texts, texts, max_size=3),
    tool_prefix=texts,
    enabled=st.booleans(),
    connect_timeout=st.one_of(durations(), st.just(duration_pb2.Duration(seconds=2))),
    call_timeout=durations(),
)


@given(data=st.data())
@EXAMPLES
async def test_toolpool_rpcs(hostile: Hostile, data: st.DataObject) -> None:
    stub = hostile.stub(toolpool_pb2_grpc.ToolPoolServiceStub, "toolpool")
    requests = {
        "ListTools": message(
            toolpool_pb2.ListToolsRequest,
            page_size=int32,
            page_token=page_tokens,
            source_kind=enums,
            mcp_server=names,
        ),
        "ResolveTools": message(
            toolpool_pb2.ResolveToolsRequest, patterns=st.lists(names, max_size=4), depth=int32
        ),
        "CallTool": message(
            toolpool_pb2.CallToolRequest,
            run_id=ids(hostile.run_id),
            tool_call_id=texts,
            tool_name=names,
            arguments=structs(),
            timeout=durations(),
        ),
        "UpsertMcpServer": message(
            toolpool_pb2.UpsertMcpServerRequest,
            mcp_server=mcp_servers,
            validate_only=st.booleans(),
        ),
        "ListMcpServers": message(
            toolpool_pb2.ListMcpServersRequest, page_size=int32, page_token=page_tokens
        ),
        "DeleteMcpServer": message(toolpool_pb2.DeleteMcpServerRequest, name=names),
        "TestMcpServer": st.one_of(
            message(toolpool_pb2.TestMcpServerRequest, name=names),
            message(toolpool_pb2.TestMcpServerRequest, mcp_server=mcp_servers),
        ),
        "SetSecret": message(toolpool_pb2.SetSecretRequest, name=names, value=texts),
        "ListSecrets": message(
            toolpool_pb2.ListSecretsRequest, page_size=int32, page_token=page_tokens
        ),
        "DeleteSecret": message(toolpool_pb2.DeleteSecretRequest, name=names),
    }
    rpc = data.draw(st.sampled_from(sorted(requests)))
    request = data.draw(requests[rpc])
    request.project_id = P
    await attack(hostile, getattr(stub, rpc)(request, timeout=30))


# -- HistoryService ----------------------------------------------------------------------


@given(data=st.data())
@EXAMPLES
async def test_history_rpcs(hostile: Hostile, data: st.DataObject) -> None:
    stub = hostile.stub(history_pb2_grpc.HistoryServiceStub, "history")
    run_ids = ids(hostile.run_id)
    requests = {
        "ListRuns": message(
            history_pb2.ListRunsRequest,
            page_size=int32,
            page_token=page_tokens,
            agent_name=names,
            statuses=st.lists(enums, max_size=3),
            parent_run_id=run_ids,
            root_run_id=run_ids,
            top_level_only=st.booleans(),
            created_after=timestamps(),
            created_before=timestamps(),
            include_internal_agents=st.booleans(),
            task_id=run_ids,
        ),
        "GetRun": message(history_pb2.GetRunRequest, run_id=run_ids),
        "ListRunMessages": message(
            history_pb2.ListRunMessagesRequest,
            run_id=run_ids,
            page_size=int32,
            page_token=page_tokens,
            roles=st.lists(enums, max_size=3),
            include_internal=st.booleans(),
            preview_chars=int32,
        ),
        "GetRunMessage": message(
            history_pb2.GetRunMessageRequest, run_id=run_ids, message_id=run_ids
        ),
        "ListRunToolCalls": message(
            history_pb2.ListRunToolCallsRequest,
            run_id=run_ids,
            page_size=int32,
            page_token=page_tokens,
            tool_name=names,
            statuses=st.lists(enums, max_size=3),
        ),
        "GetRunToolCall": message(
            history_pb2.GetRunToolCallRequest, run_id=run_ids, tool_call_id=texts
        ),
        "WatchRun": message(
            history_pb2.WatchRunRequest,
            run_id=st.one_of(texts, st.uuids().map(str), st.just(hostile.run_id)),
            after_seq=int64,
            include_internal=st.booleans(),
        ),
        "GetRunTree": message(history_pb2.GetRunTreeRequest, run_id=run_ids),
        "GetAgentStats": message(
            history_pb2.GetAgentStatsRequest,
            agent_name=names,
            window=durations(),
            end_time=timestamps(),
            include_internal_agents=st.booleans(),
        ),
    }
    rpc = data.draw(st.sampled_from(sorted(requests)))
    request = data.draw(requests[rpc])
    request.project_id = P
    await attack(hostile, getattr(stub, rpc)(request, timeout=30))


# -- DispatcherService -------------------------------------------------------------------


@pytest.fixture
async def hostile_graph(hostile: Hostile) -> dispatcher_pb2.TaskGraph:
    """A finished graph of project P (two tasks run by helper), so ids sometimes hit it."""
    stub = hostile.stub(dispatcher_pb2_grpc.DispatcherServiceStub, "dispatcher")
    pb = dispatcher_pb2
    created = await stub.CreateTaskGraph(
        pb.CreateTaskGraphRequest(
            project_id=P,
            tasks=[pb.TaskSpec(key=k, title=k, assigned_agent="helper") for k in ("a", "b")],
            edges=[pb.TaskEdge(blocker_key="a", blocked_key="b")],
        )
    )
    watch = pb.WatchTaskGraphRequest(project_id=P, task_graph_id=created.task_graph.id)
    async for _ in stub.WatchTaskGraph(watch, timeout=30):
        pass
    return created.task_graph


@st.composite
def task_specs(draw: st.DrawFn) -> dispatcher_pb2.TaskSpec:
    spec = draw(
        message(
            dispatcher_pb2.TaskSpec,
            key=st.one_of(texts, st.sampled_from(["a", "b", "c"])),
            title=texts,
            description=texts,
            assigned_agent=names,
            tags=st.lists(texts, max_size=3),
            priority=int32,
            max_retries=int32,
            timeout=durations(),
            properties=structs(),
        )
    )
    return spec


edges = st.lists(
    st.builds(
        dispatcher_pb2.TaskEdge,
        blocker_key=st.one_of(texts, st.sampled_from(["a", "b", "c"])),
        blocked_key=st.one_of(texts, st.sampled_from(["a", "b", "c"])),
    ),
    max_size=4,
)


@given(data=st.data())
@EXAMPLES
async def test_dispatcher_rpcs(
    hostile: Hostile, hostile_graph: dispatcher_pb2.TaskGraph, data: st.DataObject
) -> None:
    stub = hostile.stub(dispatcher_pb2_grpc.DispatcherServiceStub, "dispatcher")
    pb = dispatcher_pb2
    graph_ids = st.one_of(texts, st.uuids().map(str), st.just(hostile_graph.id))
    task_ids = st.one_of(
        texts, st.uuids().map(str), st.sampled_from([t.id for t in hostile_graph.tasks])
    )
    specs = st.lists(task_specs(), max_size=4)
    requests = {
        "CreateTaskGraph": message(
            pb.CreateTaskGraphRequest,
            title=texts,
            tasks=specs,
            edges=edges,
            max_parallel=int32,
            labels=st.dictionaries(texts, texts, max_size=3),
            request_id=texts,
            validate_only=st.booleans(),
        ),
        "AddTasks": message(
            pb.AddTasksRequest, task_graph_id=graph_ids, tasks=specs, edges=edges, request_id=texts
        ),
        "GetTaskGraph": message(pb.GetTaskGraphRequest, task_graph_id=graph_ids),
        "ListTaskGraphs": message(
            pb.ListTaskGraphsRequest,
            page_size=int32,
            page_token=page_tokens,
            statuses=st.lists(enums, max_size=3),
        ),
        "CancelTaskGraph": message(
            pb.CancelTaskGraphRequest, task_graph_id=graph_ids, reason=texts
        ),
        "RetryTask": message(pb.RetryTaskRequest, task_id=task_ids, feedback=texts),
        "WatchTaskGraph": message(pb.WatchTaskGraphRequest, task_graph_id=graph_ids),
        "ListTaskSessions": message(
            pb.ListTaskSessionsRequest,
            task_id=task_ids,
            page_size=int32,
            page_token=page_tokens,
        ),
    }
    assert set(requests) == {
        m.name for m in pb.DESCRIPTOR.services_by_name["DispatcherService"].methods
    }
    rpc = data.draw(st.sampled_from(sorted(requests)))
    request = data.draw(requests[rpc])
    request.project_id = P
    await attack(hostile, getattr(stub, rpc)(request, timeout=30))


async def test_too_deep_structs_are_refused_cleanly(hostile: Hostile) -> None:
    """Past protobuf's recursion limit (100) a request cannot even be parsed — not by the
    Python client either, so its bytes are put together by hand: the arguments field (5)
    of a CallToolRequest appended to the rest. The server refuses it and goes on."""
    deep = struct_pb2.Struct()
    deep.update(nested(30))
    deeper = deep.SerializeToString()
    for _ in range(20):  # each level: Struct.fields entry -> Value.struct_value -> Struct
        value = b"\x2a" + _varint(len(deeper)) + deeper
        entry = b"\x0a\x01k" + b"\x12" + _varint(len(value)) + value
        deeper = b"\x0a" + _varint(len(entry)) + entry
    base = toolpool_pb2.CallToolRequest(
        project_id=P, run_id=hostile.run_id, tool_call_id="c1", tool_name="get_entity"
    ).SerializeToString()
    raw = base + b"\x2a" + _varint(len(deeper)) + deeper
    channel = hostile.stack.channel("toolpool", token=hostile.token)
    call_tool = channel.unary_unary(
        "/agentfleet.v1.ToolPoolService/CallTool",
        request_serializer=lambda payload: payload,
        response_deserializer=toolpool_pb2.CallToolResponse.FromString,
    )
    code = await attack(hostile, call_tool(raw, timeout=10))
    assert code not in (grpc.StatusCode.OK, grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL)


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)
