"""A manifest's ``remote_agents``: checked before its install's transaction, written in it.

At install a remote agent is checked as written (the egress policy's save-time check of its
card URL host, headers, limits) but its card is not fetched: an install is one transaction
and waits on no remote peer. The card is fetched, through the egress guard, each time a
child runs (:mod:`services.executor.remote_runs`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

import asyncpg

from agentfleet.errors import AlreadyExists, FieldViolation, InvalidArgument
from services.executor.registry.definitions import AgentDefinition
from services.executor.registry.manifest import Manifest
from services.executor.registry.remote_agents import RemoteAgentRepository, check_remote_agent


def checked_remote_agents(manifest: Manifest, url_refusal: Callable[[str], str | None]) -> Manifest:
    """``manifest`` with its remote agents checked; InvalidArgument naming every bad field
    (``manifest.remote_agents[i].<field>``)."""
    checked = []
    bad: list[FieldViolation] = []
    for i, agent in enumerate(manifest.remote_agents):
        try:
            checked.append(
                check_remote_agent(
                    agent, url_refusal=url_refusal, where=f"manifest.remote_agents[{i}]"
                )
            )
        except InvalidArgument as exc:
            bad.extend(exc.violations)
    if bad:
        raise InvalidArgument.for_fields(bad)
    return dataclasses.replace(manifest, remote_agents=checked)


async def install_remote_agents(
    conn: asyncpg.Connection,
    project_id: str,
    product_id: str,
    manifest: Manifest,
    definitions: Mapping[str, AgentDefinition],
) -> None:
    """Writes the product's remote agents and removes the ones it no longer lists.
    :class:`AlreadyExists` for a name that is a definition or another owner's remote agent."""
    for i, agent in enumerate(manifest.remote_agents):
        taken = definitions.get(agent.name)
        if taken is not None or not await RemoteAgentRepository.install_in(
            conn, project_id, agent, product_id=product_id
        ):
            owner = "an agent definition" if taken is not None else "a remote agent"
            raise AlreadyExists(
                f"manifest.remote_agents[{i}].name: {agent.name!r} is {owner} of project "
                f"{project_id!r} the product does not own"
            )
    await RemoteAgentRepository.remove_unlisted_in(
        conn, project_id, product_id, [a.name for a in manifest.remote_agents]
    )
