"""Product manifests (``manifest.json``): validation and parsing into domain values.

A manifest names a product and carries its agent definitions and MCP servers::

    {"name": "research", "version": "1.0.0", "description": "...",
     "agents": [{"name": "...", "model": {"name": "gemini-2.5-flash"}, ...}],
     "mcp": {"servers": [{"name": "web", "transport": "stdio", "command": "python"}]}}

Validation is the JSON schema in ``manifest.schema.json`` (Draft 2020-12) plus the checks a
schema cannot express (duplicate names, flow membership, transport-specific fields). Every
problem is collected and reported at once as :class:`InvalidArgument`, each violation naming
its field path (``manifest.agents[2].flow_type``). Pure: no I/O except loading the schema.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentfleet.errors import FieldViolation, InvalidArgument
from agentfleet.mcp import config as mcp_config
from agentfleet.mcp.config import LiteralRefusal
from agentfleet.mcp.servers import McpServerConfig
from agentfleet.mcp.stdio import StdioAllowlist, require_allowed_stdio
from agentfleet.postgres.rows import from_row
from services.executor.output_schema import output_schema_violations
from services.executor.registry.definitions import AgentDefinition
from services.executor.registry.manifest_schema import schema_violations
from services.executor.registry.model_config import ModelConfig
from services.executor.registry.remote_agents import DEFAULT_TIMEOUT_S, RemoteAgent
from services.executor.triggers.grammar import trigger_violations

MAX_MANIFEST_BYTES = 1024 * 1024
"""Largest manifest accepted, measured as compact JSON."""
MAX_AGENTS = 200
MAX_MCP_SERVERS = 50
MAX_CONFIG_BYTES = 64 * 1024
"""Largest ``config`` of one definition (compact JSON): it is read for every run, so an
unbounded one (up to a gRPC message) would cost every run of the project that much."""


@dataclass(kw_only=True, slots=True)
class Manifest:
    """A validated manifest."""

    name: str
    version: str
    description: str
    agents: list[AgentDefinition]
    mcp_servers: list[McpServerConfig]
    """Each with project_id '' (set when installed)."""
    document: dict[str, Any]
    """The manifest as given (stored in kb.products.manifest)."""
    remote_agents: list[RemoteAgent] = field(default_factory=list)
    """Remote A2A agents (``remote_agents``), checked when installed."""


def parse_manifest(
    document: Mapping[str, Any], *, project_agents: Collection[str] | None = None
) -> Manifest:
    """Validates ``document`` and returns it as domain values.

    ``project_agents``: names of the project's other definitions that sub_agents may name
    (None skips that check). Raises :class:`InvalidArgument` listing every violation.
    """
    size = len(json.dumps(document, separators=(",", ":"), default=str).encode())
    if size > MAX_MANIFEST_BYTES:
        raise InvalidArgument.for_field(
            "manifest", f"is {size} bytes of JSON; at most {MAX_MANIFEST_BYTES} (1 MiB)"
        )
    violations = schema_violations(document, "manifest")
    if violations:
        # Semantic checks assume the schema's shapes; report the schema errors first.
        raise InvalidArgument.for_fields(violations)
    manifest = _build(dict(document))
    violations = semantic_violations(manifest, project_agents=project_agents)
    if violations:
        raise InvalidArgument.for_fields(violations)
    return manifest


def semantic_violations(
    manifest: Manifest, *, project_agents: Collection[str] | None = None
) -> list[FieldViolation]:
    """What the schema cannot check: duplicates, flow membership, transport fields."""
    out: list[FieldViolation] = []
    first_agent: dict[str, int] = {}
    default_at: int | None = None
    for i, agent in enumerate(manifest.agents):
        path = f"manifest.agents[{i}]"
        if agent.name in first_agent:
            other = first_agent[agent.name]
            out.append(_dup(f"{path}.name", "agent", agent.name, f"manifest.agents[{other}]"))
        first_agent.setdefault(agent.name, i)
        if agent.is_default:
            if default_at is not None:
                out.append(
                    FieldViolation(
                        f"{path}.is_default",
                        f"only one agent may be the default (manifest.agents[{default_at}] is)",
                    )
                )
            default_at = i if default_at is None else default_at
    known = set(first_agent) | set(project_agents or ())
    for i, agent in enumerate(manifest.agents):
        path = f"manifest.agents[{i}]"
        out.extend(flow_violations(agent, path))
        out.extend(output_schema_violations(agent.output_schema, f"{path}.output_schema"))
        out.extend(config_violations(agent.config, f"{path}.config"))
        out.extend(trigger_violations(agent.trigger, agent.config, path))
        for j, member in enumerate(agent.sub_agents):
            if project_agents is not None and member not in known and member != agent.name:
                out.append(
                    FieldViolation(
                        f"{path}.sub_agents[{j}]",
                        f"names no agent of the manifest or the project: {member!r}",
                    )
                )
    out.extend(_cycle_violations(manifest.agents))
    out.extend(_server_violations(manifest.mcp_servers))
    first_remote: dict[str, int] = {}
    for i, remote in enumerate(manifest.remote_agents):
        path = f"manifest.remote_agents[{i}].name"
        if remote.name in first_agent:
            agent_at = f"manifest.agents[{first_agent[remote.name]}]"
            out.append(_dup(path, "agent", remote.name, agent_at))
        elif remote.name in first_remote:
            other = f"manifest.remote_agents[{first_remote[remote.name]}]"
            out.append(_dup(path, "remote agent", remote.name, other))
        first_remote.setdefault(remote.name, i)
    return out


def check_stdio_servers(manifest: Manifest, allowlist: StdioAllowlist) -> None:
    """:class:`PermissionDenied` naming the first stdio server of ``manifest`` whose command
    line is not on the operator's allowlist (see :mod:`agentfleet.mcp.stdio`).

    The allowlist applies to products as to every stdio server: a product the operator
    installs may carry stdio servers once the operator has allowed their command lines.
    """
    for i, server in enumerate(manifest.mcp_servers):
        if server.transport == "stdio":
            require_allowed_stdio(
                server.command,
                server.args,
                allowlist,
                field=f"manifest.mcp.servers[{i}].command",
            )


def check_url_destinations(manifest: Manifest, refusal: LiteralRefusal) -> None:
    """:class:`InvalidArgument` naming ``manifest.mcp.servers[i].url`` for every HTTP server
    whose URL host is refused as written (literal private address, localhost, metadata
    name): the same save-time check the toolpool's UpsertMcpServer applies.
    """
    violations = [
        violation
        for i, server in enumerate(manifest.mcp_servers)
        for violation in mcp_config.url_destination_violations(
            server, refusal, prefix=f"manifest.mcp.servers[{i}]"
        )
    ]
    if violations:
        raise InvalidArgument.for_fields(violations)


def flow_violations(agent: AgentDefinition, path: str) -> list[FieldViolation]:
    """Checks that sub_agents, max_iterations and flow_type agree for one definition."""
    out: list[FieldViolation] = []
    if agent.flow_type == "single" and agent.sub_agents:
        out.append(FieldViolation(f"{path}.sub_agents", "must be empty for flow_type single"))
    if agent.flow_type != "single" and not agent.sub_agents:
        out.append(
            FieldViolation(
                f"{path}.sub_agents", f"flow_type {agent.flow_type} needs at least one sub-agent"
            )
        )
    if agent.max_iterations is not None and agent.flow_type != "loop":
        out.append(FieldViolation(f"{path}.max_iterations", "applies only to flow_type loop"))
    for j, member in enumerate(agent.sub_agents):
        if member == agent.name:
            out.append(
                FieldViolation(f"{path}.sub_agents[{j}]", "an agent cannot be its own sub-agent")
            )
    return out


def definition_violations(
    definition: AgentDefinition, prefix: str = "agent_definition"
) -> list[FieldViolation]:
    """Violations of one definition (UpsertAgentDefinition) under the manifest's agent rules."""
    document = definition_document(definition)
    out = schema_violations(document, prefix, definition="#/$defs/agent")
    out.extend(flow_violations(definition, prefix))
    out.extend(output_schema_violations(definition.output_schema, f"{prefix}.output_schema"))
    out.extend(config_violations(definition.config, f"{prefix}.config"))
    wait = definition.model.fallback_wait_s
    if wait is not None and not math.isfinite(wait):
        # JSON Schema's minimum/maximum let NaN through (every comparison is false).
        out.append(FieldViolation(f"{prefix}.model.fallback_wait_s", "must be 0 to 86400 s"))
    out.extend(trigger_violations(definition.trigger, definition.config, prefix))
    # The proto spells the timeout as a Duration named default_timeout.
    return [
        FieldViolation(v.field.replace(".default_timeout_s", ".default_timeout"), v.description)
        for v in out
    ]


def config_violations(config: Mapping[str, Any], field: str) -> list[FieldViolation]:
    """A ``config`` larger than :data:`MAX_CONFIG_BYTES`, named by ``field``."""
    size = len(json.dumps(config, separators=(",", ":"), default=str).encode())
    if size <= MAX_CONFIG_BYTES:
        return []
    return [FieldViolation(field, f"is {size} bytes of JSON; at most {MAX_CONFIG_BYTES} (64 KiB)")]


def definition_document(definition: AgentDefinition) -> dict[str, Any]:
    """A definition in manifest form (the inverse of what parse_manifest builds)."""
    document: dict[str, Any] = {
        "name": definition.name,
        "description": definition.description,
        "system_prompt": definition.system_prompt,
        "model": definition.model.to_json(),
        "tools": list(definition.tools),
        "flow_type": definition.flow_type,
        "sub_agents": list(definition.sub_agents),
        "visibility": definition.visibility,
        "is_default": definition.is_default,
        "tags": list(definition.tags),
        "trigger": definition.trigger,
        "config": dict(definition.config),
    }
    optional = {
        "streaming": definition.streaming,
        "output_schema": definition.output_schema,
        "max_iterations": definition.max_iterations,
        "max_steps": definition.max_steps,
        "default_timeout_s": definition.default_timeout_s,
    }
    document.update({key: value for key, value in optional.items() if value is not None})
    return document


def _build(document: dict[str, Any]) -> Manifest:
    return Manifest(
        name=document["name"],
        version=document["version"],
        description=document.get("description", ""),
        agents=[_agent(a) for a in document.get("agents", [])],
        mcp_servers=[_server(s) for s in document.get("mcp", {}).get("servers", [])],
        document=document,
        remote_agents=[
            RemoteAgent(
                name=r["name"],
                card_url=r["card_url"],
                headers=dict(r.get("headers", {})),
                description=r.get("description", ""),
                timeout_s=float(r.get("timeout_s", DEFAULT_TIMEOUT_S)),
            )
            for r in document.get("remote_agents", [])
        ],
    )


def _agent(doc: Mapping[str, Any]) -> AgentDefinition:
    return AgentDefinition(
        name=doc["name"],
        description=doc.get("description", ""),
        system_prompt=doc.get("system_prompt", ""),
        model=ModelConfig.from_json(doc["model"]),
        tools=list(doc.get("tools", [])),
        flow_type=doc.get("flow_type", "single"),
        sub_agents=list(doc.get("sub_agents", [])),
        # Struct numbers are doubles: the schema accepted whole numbers; store them as ints.
        max_iterations=_int(doc.get("max_iterations")),
        max_steps=_int(doc.get("max_steps")),
        default_timeout_s=_float(doc.get("default_timeout_s")),
        visibility=doc.get("visibility", "project"),
        is_default=doc.get("is_default", False),
        tags=list(doc.get("tags", [])),
        trigger=doc.get("trigger") or None,
        config=dict(doc.get("config", {})),
        output_schema=doc.get("output_schema"),
        streaming=doc.get("streaming"),
    )


def _server(doc: Mapping[str, Any]) -> McpServerConfig:
    # The schema allows only McpServerConfig's settings; what the document leaves out
    # takes the row type's defaults. Struct numbers are doubles: timeouts stay floats.
    timeouts = {k: float(doc[k]) for k in ("connect_timeout_s", "call_timeout_s") if k in doc}
    return from_row(
        McpServerConfig,
        doc,
        project_id="",
        args=tuple(doc.get("args", ())),
        env=dict(doc.get("env", {})),
        headers=dict(doc.get("headers", {})),
        **timeouts,
    )


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def _dup(path: str, kind: str, name: str, other: str) -> FieldViolation:
    return FieldViolation(path, f"duplicate {kind} name {name!r} (also at {other})")


def _server_violations(servers: list[McpServerConfig]) -> Iterable[FieldViolation]:
    first: dict[str, int] = {}
    prefixes: dict[str, int] = {}
    for i, server in enumerate(servers):
        path = f"manifest.mcp.servers[{i}]"
        duplicate = server.name in first
        if duplicate:
            yield _dup(
                f"{path}.name",
                "MCP server",
                server.name,
                f"manifest.mcp.servers[{first[server.name]}]",
            )
        first.setdefault(server.name, i)
        # The rules every MCP server row meets, whoever writes it (toolpool or product).
        yield from mcp_config.server_violations(server, prefix=path, timeout_suffix="_s")
        # Two servers exposing tools under the same prefix would shadow each other's tools.
        prefix = f"{server.name}__" if server.tool_prefix is None else server.tool_prefix
        if prefix and prefix in prefixes and not duplicate:
            yield FieldViolation(
                f"{path}.tool_prefix",
                f"exposes tools as {prefix}<tool> like manifest.mcp.servers[{prefixes[prefix]}]; "
                "their tool names would clash",
            )
        prefixes.setdefault(prefix, i)


def _cycle_violations(agents: list[AgentDefinition]) -> Iterable[FieldViolation]:
    """Flow agents of the manifest whose membership loops back to themselves."""
    index = {a.name: i for i, a in enumerate(agents)}
    members = {a.name: [m for m in a.sub_agents if m in index and m != a.name] for a in agents}
    reported: set[str] = set()
    for start in members:
        stack, seen = [(start, [start])], {start}
        while stack:
            name, trail = stack.pop()
            for member in members[name]:
                if member == start and start not in reported:
                    reported.update(trail)
                    yield FieldViolation(
                        f"manifest.agents[{index[start]}].sub_agents",
                        "flow membership forms a cycle: " + " -> ".join([*trail, start]),
                    )
                elif member not in seen:
                    seen.add(member)
                    stack.append((member, [*trail, member]))
