"""The toolpool's domain: a project's catalog, whitelist resolution, and CallTool.

Every tool call passes through :meth:`ToolPool.call`, which finds the run, checks the tool
against the run's own whitelist at the run's depth (whoever the caller is), and runs the
tool inside the run's project. Tool failures come back as error results for the model.
MCP calls in progress are capped per project (:attr:`ToolPool.max_mcp_calls_per_project`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg
from opentelemetry import trace

from agentfleet.errors import (
    AgentFleetError,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    Unavailable,
)
from agentfleet.mcp.servers import McpServerConfig
from agentfleet.observability import metrics
from agentfleet.rpc.grpc_limits import Slots
from services.toolpool.builtin import BUILTIN_TOOLS, ToolContext, ToolError, call_builtin
from services.toolpool.catalog import COORDINATION_TOOLS, ToolSpec, allows, is_glob, resolve
from services.toolpool.mcp import McpClientPool, McpServerStore, McpToolInfo, SecretStore
from services.toolpool.results import MAX_ARGUMENT_BYTES, BoundedResult, bound_result, json_size
from services.toolpool.runs import RunScope, RunScopes

tracer = trace.get_tracer("agentfleet.toolpool")

DEFAULT_TOOL_TIMEOUT_S = 60.0
MAX_TOOL_TIMEOUT_S = 600.0
DEFAULT_MAX_MCP_CALLS_PER_PROJECT = 100
"""AGENTFLEET_MAX_MCP_CALLS_PER_PROJECT's default: above what a project's 64 running runs
(AGENTFLEET_MAX_RUNNING_PER_PROJECT) need at one call each, with room for parallel calls
and spawned children; a tenth of the toolpool's server-wide RPC cap (1000)."""

BUILTIN_SPECS: tuple[ToolSpec, ...] = tuple(
    ToolSpec(
        name=tool.name,
        description=tool.description,
        parameters=tool.parameters,
        source_kind="builtin",
    )
    for tool in BUILTIN_TOOLS.values()
)
_STATIC = {spec.name: spec for spec in (*BUILTIN_SPECS, *COORDINATION_TOOLS)}
STATIC_TOOL_NAMES = frozenset(_STATIC)


@dataclass(kw_only=True, slots=True)
class Catalog:
    tools: list[ToolSpec]
    """By name."""
    unavailable: list[tuple[str, str]] = field(default_factory=list)
    """(server name, reason) of enabled MCP servers whose tools could not be listed, or
    not all of them (a listing past its limits keeps its first tools)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolOutcome:
    """The answer of CallTool."""

    bounded: BoundedResult
    """What the model reads: the tool's result (or error result), bounded in size."""
    error: str | None
    """Why the call failed; ``None`` when it succeeded."""
    failed: bool
    """The call itself failed (no answer from the tool: transport, timeout, protocol,
    configuration), as opposed to the tool's own error result."""
    duration_s: float
    spec: ToolSpec


def resolve_static(patterns: Sequence[str], depth: int) -> list[ToolSpec] | None:
    """What :meth:`ToolPool.resolve` selects for ``patterns`` that are all exact names of
    tools every catalog holds (built-in and coordination tools), without reading the
    project's catalog: an MCP tool never takes such a name (:meth:`ToolPool.catalog` drops
    a clash), so the project's servers cannot change the answer. None for other patterns
    (a glob, an MCP tool's name), which need the catalog."""
    if not patterns or not all(pattern in _STATIC for pattern in patterns):
        return None
    return resolve(_STATIC.values(), patterns, depth)


def mcp_tool_spec(config: McpServerConfig, tool: McpToolInfo) -> ToolSpec:
    """``tool`` of the MCP server ``config`` as the catalog shows it."""
    return ToolSpec(
        name=config.exposed_name(tool.name),
        description=tool.description,
        parameters=tool.input_schema,
        source_kind="mcp",
        mcp_server=config.name,
        mcp_tool_name=tool.name,
        output_schema=tool.output_schema or {},
    )


@dataclass(kw_only=True, slots=True)
class ToolPool:
    """A project's tools, wherever they run, behind one catalog and one call."""

    pool: asyncpg.Pool
    mcp: McpClientPool
    """Sessions to the projects' MCP servers (and the stdio allowlist and egress rules)."""
    servers: McpServerStore
    """The projects' MCP server configurations (``list_all``: a project's enabled ones)."""
    secrets: SecretStore
    max_mcp_calls_per_project: int = DEFAULT_MAX_MCP_CALLS_PER_PROJECT
    """MCP tool calls one project may have in progress here; one past it is refused."""
    _runs: RunScopes = field(init=False, repr=False)
    _mcp_calls: Slots = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._runs = RunScopes(self.pool)
        # CallTool comes from the executor, a service identity the gRPC caps do not count:
        # without this, a project whose MCP server hangs until its call timeout could have
        # any number of calls (tasks, sessions' requests, memory) in flight here, and every
        # other project's tool calls would wait behind them.
        self._mcp_calls = Slots(
            self.max_mcp_calls_per_project,
            holder="project {key!r}",
            calls="MCP tool calls in progress",
            variable="AGENTFLEET_MAX_MCP_CALLS_PER_PROJECT",
            advice="try again when one has finished",
        )

    async def catalog(self, project_id: str) -> Catalog:
        """Built-in + coordination tools + the tools of every enabled MCP server."""
        configs = await self.servers.list_all(project_id)
        tools = list(_STATIC.values())
        unavailable: list[tuple[str, str]] = []
        if configs:
            secrets = await self.secrets.resolve(project_id)
            listed = await asyncio.gather(*(self._mcp_specs(config, secrets) for config in configs))
            taken = set(_STATIC)
            for config, (specs, error) in zip(configs, listed, strict=True):
                # Saving refuses clashes; a server unreachable then may still bring one.
                fresh = [s for s in specs if s.name not in taken]
                taken.update(s.name for s in fresh)
                tools.extend(fresh)
                if error is not None:
                    unavailable.append((config.name, error))
        tools.sort(key=lambda t: t.name)
        return Catalog(tools=tools, unavailable=unavailable)

    async def resolve(self, project_id: str, patterns: Sequence[str], depth: int) -> Catalog:
        """The tools ``patterns`` select at ``depth`` (DESIGN §6)."""
        if not patterns:
            return Catalog(tools=[])
        catalog = await self.catalog(project_id)
        try:
            tools = resolve(catalog.tools, patterns, depth)
        except NotFound:
            self._raise_if_served_by_unavailable(patterns, catalog)
            raise
        return Catalog(tools=tools, unavailable=catalog.unavailable)

    async def call(
        self,
        *,
        project_id: str,
        run_id: str,
        tool_call_id: str,
        tool_name: str,
        arguments: dict[str, Any],
        timeout_s: float | None,
    ) -> ToolOutcome:
        """Runs one tool for a run, inside the run's project and whitelist.

        An MCP tool past its project's cap of calls in progress is refused with
        :class:`~agentfleet.errors.ResourceExhausted` naming the setting, before anything
        is looked up or sent (the executor hands the refusal to the model as the call's
        error, and the run goes on)."""
        if not tool_call_id:
            raise InvalidArgument.for_field("tool_call_id", "is required")
        if not tool_name:
            raise InvalidArgument.for_field("tool_name", "is required")
        size = json_size(arguments)
        if size > MAX_ARGUMENT_BYTES:
            raise InvalidArgument.for_field(
                "arguments", f"{size} bytes exceeds the limit of {MAX_ARGUMENT_BYTES} bytes"
            )
        if timeout_s is not None and not 0 < timeout_s <= MAX_TOOL_TIMEOUT_S:
            raise InvalidArgument.for_field(
                "timeout", f"must be more than 0 and at most {MAX_TOOL_TIMEOUT_S:.0f} seconds"
            )
        scope = await self._runs.get_running(project_id, run_id)
        if not allows(scope.tool_patterns, tool_name, scope.depth):
            raise PermissionDenied(
                f"agent {scope.agent_name!r} (depth {scope.depth}) may not call {tool_name!r}"
            )
        # Scope comes from the run, never from what the model wrote.
        arguments = {k: v for k, v in arguments.items() if k != "project_id"}
        if tool_name in _STATIC:
            return await self._execute(scope, tool_call_id, tool_name, arguments, timeout_s)
        # Held from the lookup on: finding the tool may itself wait on the server (connect,
        # tools/list) as long as the call.
        with self._mcp_calls.holding(scope.project_id):
            return await self._execute(scope, tool_call_id, tool_name, arguments, timeout_s)

    async def _execute(
        self,
        scope: RunScope,
        tool_call_id: str,
        tool_name: str,
        arguments: dict[str, Any],
        timeout_s: float | None,
    ) -> ToolOutcome:
        spec, config = await self._find(scope, tool_name)
        with tracer.start_as_current_span(
            f"execute_tool {tool_name}",
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": tool_name,
                "gen_ai.tool.call.id": tool_call_id,
                "agentfleet.tool.source": spec.source_label,
                "agentfleet.run_id": scope.run_id,
                "agentfleet.project_id": scope.project_id,
            },
        ) as span:
            started = time.monotonic()
            sent_size = None
            if config is None:
                result, error, failed = await self._call_builtin(
                    scope, tool_name, arguments, timeout_s
                )
            else:
                secrets = await self.secrets.resolve(scope.project_id)
                outcome = await self.mcp.call_tool(
                    config, secrets, spec.mcp_tool_name, arguments, timeout_s
                )
                result, error = outcome.result, outcome.error if outcome.is_error else None
                failed = outcome.outcome not in ("ok", "tool_error")
                sent_size = outcome.sent_size_bytes
            duration = time.monotonic() - started
            bounded = bound_result(result, sent_size=sent_size)
            span.set_attribute("agentfleet.tool.outcome", "error" if error else "ok")
            metrics.record_tool_call(
                tool=tool_name, source=spec.source_label, duration_s=duration, failed=bool(error)
            )
        return ToolOutcome(
            bounded=bounded, error=error, failed=failed, duration_s=duration, spec=spec
        )

    async def _call_builtin(
        self, scope: RunScope, name: str, arguments: dict[str, Any], timeout_s: float | None
    ) -> tuple[dict[str, Any], str | None, bool]:
        """(result, error, failed): a ToolError is the tool's own error; a timeout failed."""
        context = ToolContext(project_id=scope.project_id, run_id=scope.run_id, pool=self.pool)
        try:
            async with asyncio.timeout(timeout_s or DEFAULT_TOOL_TIMEOUT_S):
                return await call_builtin(context, name, arguments), None, False
        except ToolError as exc:
            return exc.to_result(), str(exc), False
        except TimeoutError:
            message = f"{name} timed out after {timeout_s or DEFAULT_TOOL_TIMEOUT_S:g} s"
            return {"error": message}, message, True

    async def _find(self, scope: RunScope, name: str) -> tuple[ToolSpec, McpServerConfig | None]:
        static = _STATIC.get(name)
        if static is not None:
            if static.executed_by_executor:
                raise FailedPrecondition(f"{name} is a coordination tool run by the executor")
            return static, None
        configs = await self.servers.list_all(scope.project_id)
        # Longest prefix first: a server named "web" must not shadow "web_archive__".
        for config in sorted(configs, key=lambda c: len(c.exposed_prefix), reverse=True):
            if not name.startswith(config.exposed_prefix):
                continue
            secrets = await self.secrets.resolve(scope.project_id)
            specs, error = await self._mcp_specs(config, secrets)
            for spec in specs:
                if spec.name == name:
                    return spec, config
            if error is not None:
                raise Unavailable(f"MCP server {config.name!r} is unavailable: {error}")
        raise NotFound(f"no tool named {name!r} in the project's catalog")

    async def _mcp_specs(
        self, config: McpServerConfig, secrets: dict[str, str]
    ) -> tuple[list[ToolSpec], str | None]:
        try:
            listing = await self.mcp.list_tools(config, secrets)
        except AgentFleetError as exc:
            return [], exc.message
        # Tools left out of a bounded listing are reported like an unlisted server's.
        return [mcp_tool_spec(config, tool) for tool in listing.tools], listing.left_out

    @staticmethod
    def _raise_if_served_by_unavailable(patterns: Sequence[str], catalog: Catalog) -> None:
        known = {t.name for t in catalog.tools}
        for pattern in patterns:
            if is_glob(pattern) or pattern in known:
                continue
            for server, reason in catalog.unavailable:
                if pattern.startswith(f"{server}__"):
                    raise Unavailable(
                        f"tool {pattern!r} is served by MCP server {server!r}, which is "
                        f"unavailable: {reason}"
                    )
