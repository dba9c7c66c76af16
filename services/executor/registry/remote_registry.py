"""Registering remote A2A agents (UpsertRemoteAgent, ListRemoteAgents, DeleteRemoteAgent).

A registration is checked twice before anything is stored: the card URL's host by the
egress policy's save-time check (a literal private address, localhost, a metadata name),
then by fetching the card once through the guarded client, with the headers' secrets
filled, so a name that resolves inside, a redirect inward, a dead URL or a page that is no
Agent Card is refused at once (INVALID_ARGUMENT naming ``remote_agent.card_url``) instead
of failing every child later.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable

from a2a.types import a2a_pb2 as a2a

from agentfleet.egress import EgressPolicy
from agentfleet.errors import InvalidArgument
from agentfleet.mcp.config import member_view
from agentfleet.secrets.values import ProjectSecrets
from services.executor.a2a_client import (
    RemoteAgentError,
    fetch_card,
    guarded_http_client,
    resolved_headers,
)
from services.executor.registry.remote_agents import (
    RemoteAgent,
    RemoteAgentRepository,
    check_remote_agent,
)

CARD_FETCH_TIMEOUT_S = 15.0


@dataclasses.dataclass(kw_only=True, slots=True)
class RemoteAgentRegistry:
    """The registry's remote agents: checked, card-verified, stored."""

    repository: RemoteAgentRepository
    egress: EgressPolicy
    secrets: Callable[[str], Awaitable[ProjectSecrets]]
    """The project's secrets by value (:func:`agentfleet.secrets.values.resolve_secrets`):
    for the check's one card fetch only, never kept."""

    async def upsert(self, project_id: str, agent: RemoteAgent) -> RemoteAgent:
        checked = check_remote_agent(agent, url_refusal=self.egress.literal_refusal)
        card = await self._card(project_id, checked)
        if not checked.description:
            checked = dataclasses.replace(checked, description=card.description[:4000])
        stored = await self.repository.upsert(project_id, checked)
        return dataclasses.replace(stored, card_name=card.name)

    async def page(
        self, project_id: str, *, admin: bool, page_size: int, page_token: str
    ) -> tuple[list[RemoteAgent], str]:
        """A page of the project's remote agents; a member sees only header values naming a
        secret (as MCP servers' headers)."""
        agents, token = await self.repository.page(
            project_id, page_size=page_size, page_token=page_token
        )
        if not admin:
            agents = [
                dataclasses.replace(a, headers=member_view({"headers": a.headers})["headers"])
                for a in agents
            ]
        return agents, token

    async def delete(self, project_id: str, name: str) -> None:
        await self.repository.delete(project_id, name)

    async def _card(self, project_id: str, agent: RemoteAgent) -> a2a.AgentCard:
        try:
            headers = resolved_headers(agent, await self.secrets(project_id))
        except RemoteAgentError as exc:
            raise InvalidArgument.for_field("remote_agent.headers", exc.message) from exc
        async with guarded_http_client(
            self.egress, headers, timeout_s=CARD_FETCH_TIMEOUT_S
        ) as http:
            try:
                return await fetch_card(http, agent.card_url)
            except RemoteAgentError as exc:
                raise InvalidArgument.for_field("remote_agent.card_url", exc.message) from exc
