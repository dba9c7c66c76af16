"""``agentfleet remote-agent add|list|remove``: the project's remote A2A agents, which
spawn_agents runs as remote children."""

from __future__ import annotations

import argparse

from agentfleet.cli.client import Connection
from agentfleet.cli.manage.tools import key_values
from agentfleet.cli.render import console, print_listing
from agentfleet.v1 import registry_pb2


def remote_agent_from(args: argparse.Namespace) -> registry_pb2.RemoteAgent:
    return registry_pb2.RemoteAgent(
        name=args.name,
        card_url=args.card_url,
        headers=key_values(args.header, "--header"),
        description=args.description or "",
        timeout_s=args.timeout or 0.0,
    )


async def remote_agent(conn: Connection, args: argparse.Namespace) -> int:
    registry = conn.registry()
    if args.remote_agent_command == "add":
        reply = await registry.UpsertRemoteAgent(
            registry_pb2.UpsertRemoteAgentRequest(
                project_id=conn.project, remote_agent=remote_agent_from(args)
            )
        )
        stored = reply.remote_agent
        console.print(f"registered remote agent {stored.name} (card: {stored.card_name})")
        return 0
    if args.remote_agent_command == "remove":
        await registry.DeleteRemoteAgent(
            registry_pb2.DeleteRemoteAgentRequest(project_id=conn.project, name=args.name)
        )
        console.print(f"removed remote agent {args.name}")
        return 0
    reply = await registry.ListRemoteAgents(
        registry_pb2.ListRemoteAgentsRequest(project_id=conn.project, page_size=100)
    )
    return print_listing(
        reply,
        reply.remote_agents,
        ("remote agent", "card url", "timeout", "product"),
        lambda a: (a.name, a.card_url, f"{a.timeout_s:g} s", a.product_name or "-"),
        json_mode=args.json,
    )
