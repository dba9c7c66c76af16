"""Task graphs written by the dispatcher's store for tests: any graph of plain tasks
(:func:`new_graph`), and a project with a default agent and a graph of one task, the
smallest thing a dispatcher can pick up (:func:`one_task`)."""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg

from services.dispatcher.graphs.dag import NewTask
from services.dispatcher.graphs.graph_writes import GraphStore
from services.executor.registry.definitions import AgentDefinition, DefinitionRepository
from services.executor.registry.model_config import ModelConfig


async def one_task(pool: asyncpg.Pool, project_id: str) -> str:
    """Makes agent "w" the project's default and a graph of one ready task; its id."""
    await DefinitionRepository(pool).upsert(
        project_id,
        AgentDefinition(name="w", system_prompt="w", model=ModelConfig(name="m"), is_default=True),
    )
    _, ids = await new_graph(pool, project_id, ["only"])
    return ids["only"]


async def new_graph(
    pool: asyncpg.Pool,
    project_id: str,
    keys: Sequence[str],
    edges: Sequence[tuple[str, str]] = (),
) -> tuple[str, dict[str, str]]:
    """A graph of tasks titled by their keys; its id and its task ids by key."""
    graph_id = await GraphStore(pool).create_graph(
        project_id,
        title="g",
        tasks=[NewTask(key=k, title=k) for k in keys],
        edges=list(edges),
        max_parallel=0,
        labels={},
        request_id="",
        validate_only=False,
    )
    assert graph_id is not None
    rows = await pool.fetch(
        "SELECT id, properties ->> 'key' AS key FROM kb.graph_objects "
        "WHERE project_id = $1 AND type = 'SpecTask' AND properties ->> 'graph_id' = $2",
        project_id,
        graph_id,
    )
    return graph_id, {r["key"]: str(r["id"]) for r in rows}
