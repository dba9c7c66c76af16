"""The request interceptor on real gRPC servers with real tokens in PostgreSQL."""

from collections.abc import AsyncIterator
from dataclasses import dataclass

import asyncpg
import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status

from agentfleet.auth import TokenAuthenticator, TokenStore, current_principal
from agentfleet.errors import FailedPrecondition, InvalidArgument
from agentfleet.rpc.clients import open_channel
from agentfleet.rpc.grpc_server import Registration, RunningServer, start_server
from agentfleet.testing.services import Stack
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


class EchoHistory(history_pb2_grpc.HistoryServiceServicer):
    """Answers GetRun with who asked; run ids pick a failure to raise."""

    async def GetRun(self, request, context):  # type: ignore[no-untyped-def]
        if request.run_id == "bad-field":
            raise InvalidArgument.for_field("run_id", "is not a UUID")
        if request.run_id == "precondition":
            raise FailedPrecondition("the run is not paused")
        if request.run_id == "crash":
            raise RuntimeError("secret internals: password=hunter2")
        principal = current_principal.get()
        return history_pb2.GetRunResponse(
            run=common_pb2.AgentRun(
                id=request.run_id,
                project_id=request.project_id,
                agent_name=principal.role,
            )
        )

    async def WatchRun(self, request, context):  # type: ignore[no-untyped-def]
        for seq in (1, 2):
            yield common_pb2.RunEvent(run_id=request.run_id, seq=seq)


class EchoToolPool(toolpool_pb2_grpc.ToolPoolServiceServicer):
    """Answers ResolveTools with no tools, whoever asks (the interceptor decides who may)."""

    async def ResolveTools(self, request, context):  # type: ignore[no-untyped-def]
        return toolpool_pb2.ResolveToolsResponse()


@dataclass
class EchoServer:
    server: RunningServer
    tokens: TokenStore

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server.port}"


@pytest.fixture
async def echo(db_pool: asyncpg.Pool) -> AsyncIterator[EchoServer]:
    tokens = TokenStore(db_pool)
    server = await start_server(
        host="127.0.0.1",
        port=0,
        registrations=[
            Registration.of(
                history_pb2,
                history_pb2_grpc,
                "HistoryService",
                EchoHistory(),
                admin_methods=["GetRunTree"],
            ),
            Registration.of(toolpool_pb2, toolpool_pb2_grpc, "ToolPoolService", EchoToolPool()),
        ],
        # No caching, so a revocation is seen by the very next call.
        authenticator=TokenAuthenticator(tokens, ttl_s=0),
    )
    try:
        yield EchoServer(server, tokens)
    finally:
        await server.stop(0)


async def _get_run(address: str, token: str | None, project: str, run_id: str = "r1"):  # type: ignore[no-untyped-def]
    async with open_channel(address, token=token) as channel:
        stub = history_pb2_grpc.HistoryServiceStub(channel)
        return await stub.GetRun(history_pb2.GetRunRequest(project_id=project, run_id=run_id))


async def _code_of(call) -> grpc.StatusCode:  # type: ignore[no-untyped-def]
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return caught.value.code()


async def test_a_valid_project_token_is_accepted(echo: EchoServer) -> None:
    created = await echo.tokens.create(project_id="alpha", role="member")
    reply = await _get_run(echo.address, created.token, "alpha")
    assert reply.run.project_id == "alpha"
    assert reply.run.agent_name == "member"


async def test_a_missing_or_unknown_token_is_unauthenticated(echo: EchoServer) -> None:
    for token in (None, "af_not-a-real-token"):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await _get_run(echo.address, token, "alpha")
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_a_token_of_another_project_is_permission_denied(echo: EchoServer) -> None:
    created = await echo.tokens.create(project_id="alpha", role="admin")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await _get_run(echo.address, created.token, "beta")
    assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "beta" in (caught.value.details() or "")


async def test_a_revoked_token_stops_working(echo: EchoServer) -> None:
    created = await echo.tokens.create(project_id="alpha", role="member")
    await _get_run(echo.address, created.token, "alpha")
    assert await echo.tokens.revoke(created.token_id)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await _get_run(echo.address, created.token, "alpha")
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_a_project_token_fills_in_an_empty_project(echo: EchoServer) -> None:
    created = await echo.tokens.create(project_id="alpha", role="member")
    reply = await _get_run(echo.address, created.token, "")
    assert reply.run.project_id == "alpha"


async def test_a_service_token_reaches_any_project_but_must_name_one(echo: EchoServer) -> None:
    created = await echo.tokens.create(project_id=None, role="service", service="executor")
    async with open_channel(echo.address, token=created.token) as channel:
        toolpool = toolpool_pb2_grpc.ToolPoolServiceStub(channel)
        for project in ("alpha", "beta"):
            await toolpool.ResolveTools(toolpool_pb2.ResolveToolsRequest(project_id=project))
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await toolpool.ResolveTools(toolpool_pb2.ResolveToolsRequest(project_id=""))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details() == "project_id: is required"


async def test_a_service_token_calls_only_its_services_methods(echo: EchoServer) -> None:
    executor = await echo.tokens.create(project_id=None, role="service", service="executor")
    dispatcher = await echo.tokens.create(project_id=None, role="service", service="dispatcher")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await _get_run(echo.address, executor.token, "alpha")
    assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert caught.value.details() == "the executor service's token may not call GetRun"
    async with open_channel(echo.address, token=dispatcher.token) as channel:
        toolpool = toolpool_pb2_grpc.ToolPoolServiceStub(channel)
        request = toolpool_pb2.ResolveToolsRequest(project_id="alpha")
        assert await _code_of(toolpool.ResolveTools(request)) == grpc.StatusCode.PERMISSION_DENIED
        history = history_pb2_grpc.HistoryServiceStub(channel)
        tree = history_pb2.GetRunTreeRequest(project_id="alpha", run_id="r")
        assert await _code_of(history.GetRunTree(tree)) == grpc.StatusCode.PERMISSION_DENIED


async def test_admin_methods_refuse_member_tokens(echo: EchoServer) -> None:
    member = await echo.tokens.create(project_id="alpha", role="member")
    async with open_channel(echo.address, token=member.token) as channel:
        stub = history_pb2_grpc.HistoryServiceStub(channel)
        request = history_pb2.GetRunTreeRequest(project_id="alpha", run_id="r")
        assert await _code_of(stub.GetRunTree(request)) == grpc.StatusCode.PERMISSION_DENIED
    admin = await echo.tokens.create(project_id="alpha", role="admin")
    async with open_channel(echo.address, token=admin.token) as channel:
        stub = history_pb2_grpc.HistoryServiceStub(channel)
        request = history_pb2.GetRunTreeRequest(project_id="alpha", run_id="r")
        # Past auth, the echo servicer does not implement it.
        assert await _code_of(stub.GetRunTree(request)) == grpc.StatusCode.UNIMPLEMENTED


async def test_domain_errors_map_to_canonical_codes_with_field_details(echo: EchoServer) -> None:
    created = await echo.tokens.create(project_id="alpha", role="member")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await _get_run(echo.address, created.token, "alpha", run_id="bad-field")
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details() == "run_id: is not a UUID"
    status = rpc_status.from_call(caught.value)
    assert status is not None
    bad_request = error_details_pb2.BadRequest()
    assert status.details[0].Unpack(bad_request)
    assert [v.field for v in bad_request.field_violations] == ["run_id"]

    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await _get_run(echo.address, created.token, "alpha", run_id="precondition")
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert caught.value.details() == "the run is not paused"


async def test_unexpected_errors_are_internal_without_internals(echo: EchoServer) -> None:
    created = await echo.tokens.create(project_id="alpha", role="member")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await _get_run(echo.address, created.token, "alpha", run_id="crash")
    assert caught.value.code() == grpc.StatusCode.INTERNAL
    details = caught.value.details() or ""
    assert details.startswith("internal error (reference ")
    assert "hunter2" not in details
    assert "Traceback" not in details


async def test_streaming_rpcs_are_checked_too(echo: EchoServer) -> None:
    created = await echo.tokens.create(project_id="alpha", role="member")
    request = history_pb2.WatchRunRequest(project_id="alpha", run_id="r1")
    async with open_channel(echo.address) as channel:
        stub = history_pb2_grpc.HistoryServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            [event async for event in stub.WatchRun(request)]
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    async with open_channel(echo.address, token=created.token) as channel:
        stub = history_pb2_grpc.HistoryServiceStub(channel)
        seqs = [event.seq async for event in stub.WatchRun(request)]
    assert seqs == [1, 2]


async def test_health_needs_no_token(echo: EchoServer) -> None:
    async with grpc.aio.insecure_channel(echo.address) as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


# --- the four real services -------------------------------------------------------------


def _one_call_per_service(stack: Stack, token: str | None, project: str):  # type: ignore[no-untyped-def]
    """One RPC of every service, named so a failure says which."""
    executor = executor_pb2_grpc.ExecutorServiceStub(stack.channel("executor", token=token))
    registry = registry_pb2_grpc.AgentRegistryServiceStub(stack.channel("executor", token=token))
    toolpool = toolpool_pb2_grpc.ToolPoolServiceStub(stack.channel("toolpool", token=token))
    dispatcher = dispatcher_pb2_grpc.DispatcherServiceStub(stack.channel("dispatcher", token=token))
    history = history_pb2_grpc.HistoryServiceStub(stack.channel("history", token=token))
    return {
        "executor.TriggerRun": lambda: executor.TriggerRun(
            executor_pb2.StartRunRequest(project_id=project, agent_name="a", input="x")
        ),
        "registry.ListProducts": lambda: registry.ListProducts(
            registry_pb2.ListProductsRequest(project_id=project)
        ),
        "toolpool.ListTools": lambda: toolpool.ListTools(
            toolpool_pb2.ListToolsRequest(project_id=project)
        ),
        "dispatcher.ListTaskGraphs": lambda: dispatcher.ListTaskGraphs(
            dispatcher_pb2.ListTaskGraphsRequest(project_id=project)
        ),
        "history.ListRuns": lambda: history.ListRuns(
            history_pb2.ListRunsRequest(project_id=project)
        ),
    }


async def test_every_service_refuses_missing_and_foreign_tokens(stack: Stack) -> None:
    alpha = await stack.create_token("alpha", role="admin")
    for token, expected in (
        (None, grpc.StatusCode.UNAUTHENTICATED),
        ("af_forged", grpc.StatusCode.UNAUTHENTICATED),
        (alpha, grpc.StatusCode.PERMISSION_DENIED),
    ):
        for name, call in _one_call_per_service(stack, token, "beta").items():
            assert await _code_of(call()) == expected, (name, token)


async def test_a_refused_project_is_not_echoed_in_full(
    stack: Stack, capfd: pytest.CaptureFixture[str]
) -> None:
    """The refused project_id is the caller's own text, of any length (1 MB here): the
    answer and the rpc_refused log line quote only its first 80 characters."""
    member = await stack.create_token("alpha", role="member")
    huge = "b" * 1_000_000
    capfd.readouterr()
    for name, call in _one_call_per_service(stack, member, huge).items():
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call()
        assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED, name
        details = caught.value.details()
        assert details == f"this token belongs to another project, not {'b' * 80!r}", name
    logged = capfd.readouterr()
    assert "rpc_refused" in logged.out + logged.err
    assert "b" * 81 not in logged.out + logged.err


async def test_every_service_lets_a_valid_token_through(stack: Stack) -> None:
    alpha = await stack.create_token("alpha", role="admin")
    refused = {grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED}
    for name, call in _one_call_per_service(stack, alpha, "alpha").items():
        code = grpc.StatusCode.OK
        try:
            await call()
        except grpc.aio.AioRpcError as exc:
            code = exc.code()
        assert code not in refused, name
        assert code != grpc.StatusCode.UNKNOWN, name


async def test_member_tokens_cannot_change_a_projects_tools(stack: Stack) -> None:
    member = await stack.create_token("alpha", role="member")
    toolpool = toolpool_pb2_grpc.ToolPoolServiceStub(stack.channel("toolpool", token=member))
    call = toolpool.SetSecret(
        toolpool_pb2.SetSecretRequest(project_id="alpha", name="K", value="v")
    )
    assert await _code_of(call) == grpc.StatusCode.PERMISSION_DENIED
