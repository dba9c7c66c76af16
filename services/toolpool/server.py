"""ToolPoolService: protobuf <-> domain for the catalog, CallTool, MCP servers and secrets."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from agentfleet.auth import current_principal
from agentfleet.bounded.schema_pool import configure_schema_pool, schema_pool
from agentfleet.egress import EgressPolicy, platform_endpoints
from agentfleet.errors import InvalidArgument
from agentfleet.mcp.config import member_view
from agentfleet.mcp.servers import McpServerConfig
from agentfleet.observability import metrics
from agentfleet.postgres.db import Listener
from agentfleet.postgres.pagination import (
    clamp_page_size,
    decode_page_token,
    encode_page_token,
    page_of,
)
from agentfleet.process.service_runtime import ServiceContext, ServiceParts
from agentfleet.rpc.grpc_server import Registration
from agentfleet.secrets.secrets_crypto import keyring_from
from agentfleet.structs import struct_dict, to_struct
from agentfleet.timestamps import duration_proto, timestamp_proto
from agentfleet.v1 import common_pb2, toolpool_pb2, toolpool_pb2_grpc
from services.toolpool.catalog import ToolSpec
from services.toolpool.clashes import check_clashes
from services.toolpool.health import server_health
from services.toolpool.mcp import (
    McpClientPool,
    McpServerStore,
    SecretStore,
    check_stdio_allowed,
    check_url_destination,
    validate_server,
)
from services.toolpool.mcp.redaction import redactor
from services.toolpool.toolpool import Catalog, ToolPool, mcp_tool_spec

# Changing what a project's agents can reach is an administrator's act; so is testing a
# server, which starts it (a process, or a connection) with the project's secrets filled in.
ADMIN_METHODS = (
    "UpsertMcpServer",
    "DeleteMcpServer",
    "TestMcpServer",
    "SetSecret",
    "DeleteSecret",
)

_KINDS = {
    "builtin": common_pb2.TOOL_SOURCE_KIND_BUILTIN,
    "mcp": common_pb2.TOOL_SOURCE_KIND_MCP,
    "executor": common_pb2.TOOL_SOURCE_KIND_EXECUTOR,
}
_TRANSPORTS = {
    toolpool_pb2.MCP_TRANSPORT_STDIO: "stdio",
    toolpool_pb2.MCP_TRANSPORT_SSE: "sse",
    toolpool_pb2.MCP_TRANSPORT_STREAMABLE_HTTP: "streamable_http",
}


class _NamedRows(Protocol):
    """A store of a project's rows by name (MCP servers, secrets)."""

    async def list(
        self, project_id: str, *, page_size: int = 0, page_token: str = ""
    ) -> tuple[list[Any], str]: ...

    async def delete(self, project_id: str, name: str) -> None: ...


class ToolPoolServicer(toolpool_pb2_grpc.ToolPoolServiceServicer):
    def __init__(self, toolpool: ToolPool) -> None:
        self._toolpool = toolpool

    async def ListTools(self, request, context):  # type: ignore[no-untyped-def]
        size = clamp_page_size(request.page_size)
        kind = next((k for k, v in _KINDS.items() if v == request.source_kind), None)
        filters = {"p": request.project_id, "k": kind, "s": request.mcp_server}
        position = decode_page_token(request.page_token, filters, kinds=(str,))
        catalog = await self._toolpool.catalog(request.project_id)
        tools = [
            t
            for t in catalog.tools
            if (kind is None or t.source_kind == kind)
            and (not request.mcp_server or t.mcp_server == request.mcp_server)
            and (position is None or t.name > position[0])
        ]
        page, more = page_of(tools, size)
        return toolpool_pb2.ListToolsResponse(
            tools=[tool_definition(t) for t in page],
            next_page_token=encode_page_token([page[-1].name], filters) if more else "",
            unavailable_servers=_unavailable(catalog),
        )

    async def ResolveTools(self, request, context):  # type: ignore[no-untyped-def]
        resolved = await self._toolpool.resolve(
            request.project_id, list(request.patterns), request.depth
        )
        return toolpool_pb2.ResolveToolsResponse(
            tools=[tool_definition(t) for t in resolved.tools],
            unavailable_servers=_unavailable(resolved),
        )

    async def CallTool(self, request, context):  # type: ignore[no-untyped-def]
        outcome = await self._toolpool.call(
            project_id=request.project_id,
            run_id=request.run_id,
            tool_call_id=request.tool_call_id,
            tool_name=request.tool_name,
            arguments=struct_dict(request.arguments),
            timeout_s=request.timeout.ToTimedelta().total_seconds()
            if request.HasField("timeout")
            else None,
        )
        response = toolpool_pb2.CallToolResponse(
            is_error=outcome.error is not None,
            failed=outcome.failed,
            error_message=outcome.error or "",
            truncated=outcome.bounded.truncated,
            result_size_bytes=outcome.bounded.size_bytes,
            source=_source(outcome.spec),
        )
        # Filled in place: building a Struct and passing it in would copy the result again.
        # SetInParent keeps an empty result present, as the constructor did.
        response.result.SetInParent()
        response.result.update(outcome.bounded.result)
        response.duration.CopyFrom(duration_proto(outcome.duration_s))
        return response

    async def UpsertMcpServer(self, request, context):  # type: ignore[no-untyped-def]
        config = mcp_server_config(request.project_id, request.mcp_server)
        validate_server(config)
        check_url_destination(config, self._toolpool.mcp.egress)
        check_stdio_allowed(config, self._toolpool.mcp.stdio_allowlist)
        await check_clashes(config, self._toolpool)
        if request.validate_only:
            return toolpool_pb2.UpsertMcpServerResponse(mcp_server=mcp_server_message(config))
        stored, created = await self._toolpool.servers.upsert(config)
        self._toolpool.mcp.invalidate(request.project_id, stored.name)
        return toolpool_pb2.UpsertMcpServerResponse(
            mcp_server=mcp_server_message(stored), created=created
        )

    async def ListMcpServers(self, request, context):  # type: ignore[no-untyped-def]
        servers, token = await _page(self._toolpool.servers, request)
        if current_principal.get().role != "admin":
            servers = [_member_view(s) for s in servers]
        messages = [mcp_server_message(s) for s in servers]
        for message in messages:
            # This replica's view, from its own calls (a member may read it: no secret in it).
            message.health.CopyFrom(
                server_health(self._toolpool.mcp, request.project_id, message.name)
            )
        return toolpool_pb2.ListMcpServersResponse(mcp_servers=messages, next_page_token=token)

    async def DeleteMcpServer(self, request, context):  # type: ignore[no-untyped-def]
        await self._delete(self._toolpool.servers, request, server=request.name)
        return toolpool_pb2.DeleteMcpServerResponse()

    async def TestMcpServer(self, request, context):  # type: ignore[no-untyped-def]
        target = request.WhichOneof("target")
        if target == "name":
            config = await self._toolpool.servers.get(request.project_id, request.name)
        elif target == "mcp_server":
            config = mcp_server_config(request.project_id, request.mcp_server)
            validate_server(config)
        else:
            raise InvalidArgument.for_field("target", "name or mcp_server is required")
        # Before the secrets are read: a refused server learns nothing of them.
        check_stdio_allowed(config, self._toolpool.mcp.stdio_allowlist)
        secrets = await self._toolpool.secrets.resolve(request.project_id)
        # Timed around the probe alone (connect, initialize, list tools), as the field says;
        # a failed probe reports how long it took to fail too (a timeout reads as one).
        started = time.monotonic()
        try:
            probe = await self._toolpool.mcp.test_server(config, secrets)
        except Exception as exc:  # every failure to reach the server is the answer itself
            message = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
            return toolpool_pb2.TestMcpServerResponse(
                ok=False,
                error=redactor(secrets).bounded(message),
                duration=duration_proto(time.monotonic() - started),
            )
        return toolpool_pb2.TestMcpServerResponse(
            ok=True,
            # What a listing past its limits left out: the admin should know it is partial.
            error=probe.left_out or "",
            duration=duration_proto(time.monotonic() - started),
            tools=[tool_definition(mcp_tool_spec(config, tool)) for tool in probe.tools],
            server_name=probe.server_name,
            server_version=probe.server_version,
        )

    async def SetSecret(self, request, context):  # type: ignore[no-untyped-def]
        info, created = await self._toolpool.secrets.set(
            request.project_id, request.name, request.value
        )
        # A changed secret may change a session's settings: drop the project's sessions.
        self._toolpool.mcp.invalidate(request.project_id)
        return toolpool_pb2.SetSecretResponse(secret=_secret(info), created=created)

    async def ListSecrets(self, request, context):  # type: ignore[no-untyped-def]
        secrets, token = await _page(self._toolpool.secrets, request)
        return toolpool_pb2.ListSecretsResponse(
            secrets=[_secret(s) for s in secrets], next_page_token=token
        )

    async def DeleteSecret(self, request, context):  # type: ignore[no-untyped-def]
        # Any server's settings may have used the secret: all the project's sessions go.
        await self._delete(self._toolpool.secrets, request, server=None)
        return toolpool_pb2.DeleteSecretResponse()

    async def _delete(self, rows: _NamedRows, request: Any, *, server: str | None) -> None:
        """Deletes the row ``request`` names, then drops this replica's sessions of
        ``server`` (every server of the project if ``None``) at once: other replicas learn
        of it by NOTIFY."""
        _required("name", request.name)
        await rows.delete(request.project_id, request.name)
        self._toolpool.mcp.invalidate(request.project_id, server)


def tool_definition(spec: ToolSpec) -> toolpool_pb2.ToolDefinition:
    return toolpool_pb2.ToolDefinition(
        name=spec.name,
        description=spec.description,
        parameters=to_struct(spec.parameters),
        source=_source(spec),
        executed_by=toolpool_pb2.TOOL_EXECUTOR_EXECUTOR
        if spec.executed_by_executor
        else toolpool_pb2.TOOL_EXECUTOR_TOOLPOOL,
        output_schema=to_struct(spec.output_schema) if spec.output_schema else None,
        mcp_tool_name=spec.mcp_tool_name,
    )


def mcp_server_config(project_id: str, message: toolpool_pb2.McpServer) -> McpServerConfig:
    """A configuration from a request; output-only fields are ignored."""
    transport = _TRANSPORTS.get(message.transport)
    if transport is None:
        raise InvalidArgument.for_field(
            "mcp_server.transport", "must be STDIO, SSE or STREAMABLE_HTTP"
        )
    defaults = McpServerConfig(project_id=project_id, name="", transport=transport)
    return McpServerConfig(
        project_id=project_id,
        name=message.name,
        transport=transport,
        command=message.command or None,
        args=tuple(message.args),
        env=dict(message.env),
        url=message.url or None,
        headers=dict(message.headers),
        tool_prefix=message.tool_prefix if message.HasField("tool_prefix") else None,
        enabled=message.enabled if message.HasField("enabled") else True,
        connect_timeout_s=message.connect_timeout.ToTimedelta().total_seconds()
        if message.HasField("connect_timeout")
        else defaults.connect_timeout_s,
        call_timeout_s=message.call_timeout.ToTimedelta().total_seconds()
        if message.HasField("call_timeout")
        else defaults.call_timeout_s,
    )


def _member_view(config: McpServerConfig) -> McpServerConfig:
    shown = member_view({"env": config.env, "headers": config.headers, "url": config.url})
    return dataclasses.replace(config, **shown)


def mcp_server_message(config: McpServerConfig) -> toolpool_pb2.McpServer:
    transport = next(k for k, v in _TRANSPORTS.items() if v == config.transport)
    message = toolpool_pb2.McpServer(
        name=config.name,
        transport=transport,
        command=config.command or "",
        args=list(config.args),
        env=config.env,
        url=config.url or "",
        headers=config.headers,
        enabled=config.enabled,
        connect_timeout=duration_proto(config.connect_timeout_s),
        call_timeout=duration_proto(config.call_timeout_s),
        product_name=config.product_name or "",
    )
    if config.tool_prefix is not None:
        message.tool_prefix = config.tool_prefix
    if config.created_at is not None:
        message.create_time.CopyFrom(timestamp_proto(config.created_at))
    if config.updated_at is not None:
        message.update_time.CopyFrom(timestamp_proto(config.updated_at))
    return message


def _source(spec: ToolSpec) -> common_pb2.ToolSource:
    return common_pb2.ToolSource(kind=_KINDS[spec.source_kind], mcp_server=spec.mcp_server)


def _unavailable(catalog: Catalog) -> list[toolpool_pb2.UnavailableServer]:
    return [toolpool_pb2.UnavailableServer(name=n, error=e) for n, e in catalog.unavailable]


def _secret(info) -> toolpool_pb2.Secret:  # type: ignore[no-untyped-def]
    return toolpool_pb2.Secret(
        name=info.name,
        create_time=timestamp_proto(info.created_at),
        update_time=timestamp_proto(info.updated_at),
    )


async def _page(rows: _NamedRows, request: Any) -> tuple[list[Any], str]:
    """The page of the project's rows a List request asks for, and the next page token."""
    return await rows.list(
        request.project_id, page_size=request.page_size, page_token=request.page_token
    )


def _required(field: str, value: str) -> None:
    if not value:
        raise InvalidArgument.for_field(field, "is required")


async def build(context: ServiceContext) -> ServiceParts:
    configure_schema_pool(
        workers=context.settings.schema_workers, timeout_s=context.settings.schema_timeout_s
    )
    servers = McpServerStore(context.pool)
    secrets = SecretStore(
        context.pool,
        keyring_from(context.settings.secrets_keys),
        max_secrets_per_project=context.settings.max_secrets_per_project,
    )
    allowlist = context.settings.mcp_stdio_allowlist
    egress = EgressPolicy(
        allowed_networks=context.settings.mcp_allowed_networks,
        # Read at each connect: a test stack learns its services' ports after this build.
        platform_endpoints=lambda: platform_endpoints(context.settings, context.database_url),
    )
    mcp = McpClientPool(stdio_allowlist=allowlist, egress=egress)
    metrics.observe_mcp_pool(mcp)
    toolpool = ToolPool(
        pool=context.pool,
        mcp=mcp,
        servers=servers,
        secrets=secrets,
        max_mcp_calls_per_project=context.settings.max_mcp_calls_per_project,
    )
    listener = Listener(context.database_url)
    servicer = ToolPoolServicer(toolpool)

    async def follow_changes(stopping: asyncio.Event) -> None:
        # Another replica (or the registry) changed MCP servers: drop cached sessions/tools.
        await listener.start()
        await mcp.listen(listener)
        await stopping.wait()

    closers: list[Callable[[], Awaitable[None]]] = [
        mcp.aclose,
        listener.close,
        schema_pool().aclose,
    ]
    return ServiceParts(
        registrations=[
            Registration.of(
                toolpool_pb2,
                toolpool_pb2_grpc,
                "ToolPoolService",
                servicer,
                admin_methods=ADMIN_METHODS,
            )
        ],
        background=[follow_changes],
        on_stop=closers,
    )
