"""``agentfleet agents`` and ``agentfleet install``: the agent registry."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import yaml
from google.protobuf.struct_pb2 import Struct
from rich.text import Text

from agentfleet.cli.client import CliError, Connection
from agentfleet.cli.render import console, enum_name, print_json, print_listing
from agentfleet.v1 import common_pb2, registry_pb2


async def list_agents(conn: Connection, args: argparse.Namespace) -> int:
    reply = await conn.registry().ListAgentDefinitions(
        registry_pb2.ListAgentDefinitionsRequest(
            project_id=conn.project, page_size=args.limit, page_token=args.page_token or ""
        )
    )
    return print_listing(
        reply,
        reply.agent_definitions,
        ("agent", "flow", "visibility", "model", "tools", "product", "description"),
        _agent_row,
        json_mode=args.json,
        next_page_token=reply.next_page_token,
    )


def _agent_row(agent: common_pb2.AgentDefinition) -> tuple[str | Text, ...]:
    default = (" (default)", "green") if agent.is_default else ""
    return (
        Text.assemble(agent.name, default),
        enum_name(common_pb2.FlowType, agent.flow_type, "FLOW_TYPE_"),
        enum_name(common_pb2.Visibility, agent.visibility, "VISIBILITY_"),
        agent.model.name,
        ", ".join(agent.tools),
        agent.product_name or "-",
        agent.description[:60],
    )


def read_document(path: str, what: str) -> dict[str, Any]:
    """A YAML or JSON file as a mapping, or a CliError naming the file."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise CliError("INVALID_ARGUMENT", f"{what} {path}: {exc.strerror}") from None
    try:
        data = json.loads(text) if path.endswith(".json") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        reason = str(exc).splitlines()[0]
        raise CliError("INVALID_ARGUMENT", f"{what} {path} is not valid: {reason}") from None
    if not isinstance(data, dict):
        raise CliError("INVALID_ARGUMENT", f"{what} {path} must hold a mapping")
    return data


async def install_product(conn: Connection, args: argparse.Namespace) -> int:
    manifest = Struct()
    manifest.update(read_document(args.manifest, "manifest"))
    reply = await conn.registry().InstallProduct(
        registry_pb2.InstallProductRequest(
            project_id=conn.project, manifest=manifest, validate_only=args.validate_only
        )
    )
    if args.json:
        print_json(reply)
        return 0
    product = reply.product
    verb = "valid" if args.validate_only else "installed"
    upgrade = f" (was {reply.previous_version})" if reply.previous_version else ""
    console.print(f"{verb} {product.name} {product.version}{upgrade}")
    for label, names in (
        ("created agents", reply.created_agent_names),
        ("updated agents", reply.updated_agent_names),
        ("removed agents", reply.removed_agent_names),
        ("mcp servers", reply.upserted_mcp_server_names),
    ):
        if names:
            console.print(f"  {label}: {', '.join(names)}")
    return 0
