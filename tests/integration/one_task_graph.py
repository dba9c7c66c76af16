"""A project with a default agent and a task graph of one task: the smallest thing a
dispatcher can pick up (shared by the dispatcher tests that drive one task)."""

from __future__ import annotations

import asyncpg

from services.dispatcher.dag import NewTask
from services.dispatcher.graph_writes import GraphStore
from services.executor.registry.definitions import AgentDefinition, DefinitionRepository
from services.executor.registry.model_config import ModelConfig


async def one_task(pool: asyncpg.Pool, project_id: str) -> str:
    """Makes agent "w" the project's default and a graph of one ready task; its id."""
    await DefinitionRepository(pool).upsert(
        project_id,
        AgentDefinition(name="w", system_prompt="w", model=ModelConfig(name="m"), is_default=True),
    )
    graph_id = await GraphStore(pool).create_graph(
        project_id,
        title="one",
        tasks=[NewTask(key="only", title="the only task")],
        edges=[],
        max_parallel=0,
        labels={},
        request_id="",
        validate_only=False,
    )
    return str(
        await pool.fetchval(
            "SELECT id FROM kb.graph_objects WHERE project_id = $1 AND type = 'SpecTask' "
            "AND properties ->> 'graph_id' = $2",
            project_id,
            graph_id,
        )
    )
