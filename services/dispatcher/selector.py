"""Agent selection (DESIGN §9): assigned_agent -> tag rules -> optional LLM choice -> the
project's default agent. Every answer says how and why (recorded on the Session).

A task made by ``create_subtasks`` carries ``allowed_agents`` (the creating run's
``config.subtask_agents``): every step chooses among those agents only, so an agent cannot
hand work to a more privileged one through the dispatcher."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import asyncpg
import structlog

from agentfleet.graph.task_properties import agent_allowed, allowed_agent_patterns
from agentfleet.llm import ModelClient
from services.dispatcher.model_json import ask_for_json
from services.dispatcher.store.agents import AgentInfo, selectable_agents
from services.dispatcher.store.sessions import Choice

__all__ = ["AgentInfo", "LlmChooser", "NoAgent", "Selector", "choose_by_rules"]

log = structlog.get_logger(__name__)


class NoAgent(Exception):
    """No rule chose an agent and the project has no default agent."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RuleResult:
    """A choice, or the tied candidates a rule could not split (for the LLM)."""

    choice: Choice | None = None
    tied: tuple[AgentInfo, ...] = field(default_factory=tuple)


def choose_by_rules(
    *, assigned_agent: str, tags: Sequence[str], agents: Sequence[AgentInfo]
) -> RuleResult:
    """assigned_agent, else the agents sharing most tags with the task. Pure."""
    if assigned_agent:
        return RuleResult(
            choice=Choice(agent_name=assigned_agent, chosen_by="assigned", reason="assigned_agent")
        )
    wanted = set(tags)
    scored = [(len(wanted & set(a.tags)), a) for a in agents]
    best = max((score for score, _ in scored), default=0)
    if best == 0:
        return RuleResult()
    top = sorted((a for score, a in scored if score == best), key=lambda a: a.name)
    if len(top) == 1:
        shared = sorted(wanted & set(top[0].tags))
        matched = ", ".join(f"'{t}'" for t in shared)
        return RuleResult(
            choice=Choice(
                agent_name=top[0].name,
                chosen_by="tag_rule",
                reason=f"tag {matched} -> {top[0].name}",
            )
        )
    return RuleResult(tied=tuple(top))


class Chooser(Protocol):
    async def choose(
        self, *, title: str, description: str, candidates: Sequence[AgentInfo]
    ) -> Choice | None: ...


CHOICE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "agent": {"type": "string", "description": "Name of the chosen agent."},
        "reason": {"type": "string", "description": "One sentence: why this agent."},
    },
    "required": ["agent", "reason"],
}


class LlmChooser:
    """One model call with a JSON-schema answer picking among tied candidates (seed 002 v2).
    Any failure or an answer naming no candidate falls back (returns None)."""

    def __init__(self, client: ModelClient, *, model: str) -> None:
        self._client = client
        self._model = model

    async def choose(
        self, *, title: str, description: str, candidates: Sequence[AgentInfo]
    ) -> Choice | None:
        listing = "\n".join(
            f"- {a.name}: {a.description} (tags: {', '.join(a.tags)})" for a in candidates
        )
        prompt = f"Task: {title}\n{description}\n\nAgents:\n{listing}"
        try:
            answer = await ask_for_json(
                self._client,
                model=self._model,
                instruction="You assign a task to the best agent of a list. Answer "
                "with JSON naming one agent of the list and why.",
                prompt=prompt,
                schema=CHOICE_SCHEMA,
            )
        except Exception as exc:  # the LLM is an upgrade, never a dependency
            log.warning("llm agent choice failed; falling back", error=str(exc))
            return None
        names = {a.name for a in candidates}
        if not isinstance(answer, dict) or answer.get("agent") not in names:
            return None
        return Choice(
            agent_name=answer["agent"], chosen_by="llm", reason=str(answer.get("reason", ""))[:500]
        )


class Selector:
    """Reads the project's agents (``store.agents``) and applies the selector order."""

    def __init__(self, pool: asyncpg.Pool, *, chooser: Chooser | None = None) -> None:
        self._pool = pool
        self._chooser = chooser

    async def agents(
        self, project_id: str, *, conn: asyncpg.Connection | None = None
    ) -> list[AgentInfo]:
        """The project's selectable agents (``conn`` to read on a connection already held)."""
        return await selectable_agents(conn or self._pool, project_id)

    async def select(
        self, project_id: str, task: dict[str, Any], *, agents: Sequence[AgentInfo] | None = None
    ) -> Choice:
        """The agent for the task; ``agents`` when the caller already read them."""
        assigned = str(task.get("assigned_agent") or "")
        allowed = allowed_agent_patterns(task)
        if assigned and allowed is not None and not agent_allowed(assigned, allowed):
            raise NoAgent(
                f"assigned_agent {assigned!r} is not one the task's creator may assign "
                f"(allowed: {', '.join(allowed) or 'none'})"
            )
        if assigned:
            agents = []
        elif agents is None:
            agents = await self.agents(project_id)
        if allowed is not None:
            agents = [a for a in agents if agent_allowed(a.name, allowed)]
        result = choose_by_rules(
            assigned_agent=assigned, tags=[str(t) for t in task.get("tags", [])], agents=agents
        )
        if result.choice is not None:
            return result.choice
        if result.tied and self._chooser is not None:
            chosen = await self._chooser.choose(
                title=str(task.get("title", "")),
                description=str(task.get("description", "")),
                candidates=result.tied,
            )
            if chosen is not None:
                return chosen
        if result.tied:
            names = ", ".join(a.name for a in result.tied)
            return Choice(
                agent_name=result.tied[0].name,
                chosen_by="tag_rule",
                reason=f"tags matched {names} equally; first by name",
            )
        default = next((a for a in agents if a.is_default), None)
        if default is None and allowed is not None and len(agents) == 1:
            return Choice(
                agent_name=agents[0].name,
                chosen_by="default_agent",
                reason="the only agent the task's creator may assign",
            )
        if default is None and allowed is not None:
            raise NoAgent(
                f"no agent for the task: no assigned_agent and no agent the task's creator may "
                f"assign ({', '.join(allowed) or 'none'}) matches its tags or is the default"
            )
        if default is None:
            raise NoAgent(
                f"no agent for the task: no assigned_agent, no agent's tags match "
                f"{sorted(task.get('tags', []))}, and project {project_id} has no default agent"
            )
        return Choice(
            agent_name=default.name, chosen_by="default_agent", reason="the project's default agent"
        )
