"""Agent definitions of a project (table ``kb.agent_definitions``) and their repository.

:class:`AgentDefinition` mirrors every column; :class:`DefinitionRepository` is the one place
that reads and writes the table. Every statement is scoped by ``project_id``. Product
installation writes definitions through the ``*_in`` methods, which take a connection so
the caller can hold one transaction across several aggregates.
"""

from __future__ import annotations

import builtins
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import asyncpg

from agentfleet.errors import Aborted, AlreadyExists, NotFound
from agentfleet.postgres.project_rows import delete_named, delete_product_rows, name_page
from agentfleet.postgres.rows import from_row
from services.executor.approvals.approvals import check_definition_config
from services.executor.registry.model_config import ModelConfig

FlowType = Literal["single", "sequential", "loop", "parallel"]
Visibility = Literal["external", "project", "internal"]

FLOW_TYPES: tuple[FlowType, ...] = ("single", "sequential", "loop", "parallel")
VISIBILITIES: tuple[Visibility, ...] = ("external", "project", "internal")
DEFAULT_MAX_ITERATIONS = 10
"""LOOP flow passes when the definition leaves max_iterations unset."""
EXTERNAL_LISTING: tuple[Visibility, ...] = ("external", "project")
"""Visibilities listed when the caller names none (INTERNAL only on request)."""


@dataclass(kw_only=True, slots=True)
class AgentDefinition:
    """One agent of a project: prompt, model, tools and flow (a row of kb.agent_definitions).

    Build one with just ``name`` (and whatever else you need) to upsert it; ``id``,
    ``project_id``, ``product_id``, ``product_name``, ``version`` and the timestamps are
    set by the repository.
    """

    name: str
    description: str = ""
    system_prompt: str = ""
    model: ModelConfig = field(default_factory=ModelConfig)
    tools: list[str] = field(default_factory=list)
    """Tool names and fnmatch globs, resolved by ToolPool at run start."""
    flow_type: FlowType = "single"
    sub_agents: list[str] = field(default_factory=list)
    """Member agents of sequential, loop and parallel flows, in order."""
    max_iterations: int | None = None
    """Loop flow passes; None = DEFAULT_MAX_ITERATIONS."""
    max_steps: int | None = None
    """None: unlimited at top level, 50 for sub-agents (DESIGN §6)."""
    default_timeout_s: float | None = None
    """None: no timeout unless the request or spawn sets one."""
    visibility: Visibility = "project"
    is_default: bool = False
    tags: list[str] = field(default_factory=list)
    trigger: str | None = None
    """Event that triggers the agent (e.g. "on_document_ingested"); None = requests only."""
    config: dict[str, Any] = field(default_factory=dict)
    output_schema: dict[str, Any] | None = None
    """JSON Schema of the final answer (stored as AgentRun.output); None = free text."""
    streaming: bool | None = None
    """Stream model replies: MODEL_TEXT_DELTA events reach live subscribers."""
    id: uuid.UUID | None = None
    project_id: str = ""
    product_id: uuid.UUID | None = None
    """Product that installed the definition; None when made by hand."""
    product_name: str = ""
    """Name of that product ("" when made by hand); read from kb.products."""
    version: int = 0
    """Revision: 1 on create, bumped by every upsert. 0 before the first write."""
    created_at: datetime | None = None
    updated_at: datetime | None = None


_COLUMNS = """
    d.id, d.project_id, d.name, d.description, d.system_prompt, d.model, d.tools,
    d.flow_type, d.sub_agents, d.max_iterations, d.max_steps, d.default_timeout_s,
    d.visibility, d.is_default, d.tags, d.trigger, d.config, d.product_id, d.version,
    d.output_schema, d.streaming,
    d.created_at, d.updated_at, coalesce(p.name, '') AS product_name
"""
_FROM = "kb.agent_definitions d LEFT JOIN kb.products p ON p.id = d.product_id"


def definition_from_row(row: asyncpg.Record) -> AgentDefinition:
    """A row selected with the repository's column list, as a dataclass."""
    return from_row(
        AgentDefinition,
        row,
        model=ModelConfig.from_json(row["model"]),
        tools=list(row["tools"]),
        sub_agents=list(row["sub_agents"]),
        tags=list(row["tags"]),
        config=dict(row["config"] or {}),
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class UpsertResult:
    definition: AgentDefinition
    created: bool
    """True when the definition did not exist before."""


class DefinitionRepository:
    """Reads and writes agent definitions of one project at a time."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def get(self, project_id: str, name: str) -> AgentDefinition:
        """The definition named ``name``; :class:`NotFound` naming the agent otherwise."""
        found = await self._select(self._pool, project_id, "d.name = $2", name)
        if not found:
            raise NotFound(f"agent {name!r} not found in project {project_id!r}")
        return found[0]

    async def get_by_id(self, project_id: str, definition_id: uuid.UUID) -> AgentDefinition:
        """The definition with this id in the project; :class:`NotFound` otherwise."""
        found = await self._select(self._pool, project_id, "d.id = $2::uuid", definition_id)
        if not found:
            raise NotFound(f"agent definition {definition_id} not found in project {project_id!r}")
        return found[0]

    async def list(
        self,
        project_id: str,
        *,
        visibilities: Sequence[Visibility] = EXTERNAL_LISTING,
        product_name: str = "",
        page_size: int = 0,
        page_token: str = "",
    ) -> tuple[builtins.list[AgentDefinition], str]:
        """One page of definitions by name, filtered by visibility (and product), and the next
        page token ('' at the end)."""
        wanted = sorted(set(visibilities))
        page, token = await name_page(
            lambda after, limit: self._pool.fetch(
                f"""
                SELECT {_COLUMNS} FROM {_FROM}
                WHERE d.project_id = $1
                  AND d.visibility = ANY($2::text[])
                  AND ($3::text = '' OR p.name = $3::text)
                  AND ($4::text IS NULL OR d.name > $4::text)
                ORDER BY d.name
                LIMIT $5
                """,
                project_id,
                wanted,
                product_name,
                after,
                limit,
            ),
            page_size=page_size,
            page_token=page_token,
            filters={"project_id": project_id, "visibilities": wanted, "product": product_name},
        )
        return [definition_from_row(r) for r in page], token

    async def list_all(self, project_id: str) -> builtins.list[AgentDefinition]:
        """Every definition of the project, any visibility, by name (list_available_agents)."""
        return await self._select(self._pool, project_id)

    async def list_all_in(
        self, conn: asyncpg.Connection, project_id: str
    ) -> dict[str, AgentDefinition]:
        """Every definition of the project by name, read on the caller's connection."""
        return {d.name: d for d in await self._select(conn, project_id)}

    async def default_agent(self, project_id: str) -> AgentDefinition | None:
        """The project's default agent (is_default), or None when no definition has it."""
        defaults = await self._select(self._pool, project_id, "d.is_default")
        return defaults[0] if defaults else None

    async def upsert(
        self,
        project_id: str,
        definition: AgentDefinition,
        expected_version: int | None = None,
        *,
        validate_only: bool = False,
    ) -> UpsertResult:
        """Creates or replaces (every field) the definition named ``definition.name``.

        The version is bumped on every write. With ``expected_version`` the write happens
        only if the stored version equals it: :class:`Aborted` when stale, :class:`NotFound`
        when the definition does not exist. Setting ``is_default`` clears it elsewhere.
        The product link of an existing definition is kept. ``validate_only`` returns what
        would be stored and writes nothing.
        """
        async with self._pool.acquire() as conn:
            transaction = conn.transaction()
            await transaction.start()
            try:
                result = await self.upsert_in(
                    conn, project_id, definition, expected_version=expected_version
                )
            except BaseException:
                await transaction.rollback()
                raise
            if validate_only:
                await transaction.rollback()
            else:
                await transaction.commit()
            return result

    async def upsert_in(
        self,
        conn: asyncpg.Connection,
        project_id: str,
        definition: AgentDefinition,
        *,
        expected_version: int | None = None,
        product_id: uuid.UUID | None = None,
    ) -> UpsertResult:
        """:meth:`upsert` on the caller's connection (inside the caller's transaction).

        ``product_id`` set: the definition is linked to that product (product install);
        :class:`AlreadyExists` if it exists and belongs to no product or another one.
        """
        check_definition_config(definition.config)
        # Lock the row (if any) so the version check and the write see the same revision.
        current = await conn.fetchrow(
            "SELECT version, product_id FROM kb.agent_definitions "
            "WHERE project_id = $1 AND name = $2 FOR UPDATE",
            project_id,
            definition.name,
        )
        if product_id is not None and current is not None and current["product_id"] != product_id:
            # Checked before by the installer; this closes the race with a concurrent upsert.
            raise AlreadyExists(
                f"agent definition {definition.name!r} already exists in project "
                f"{project_id!r} and belongs to no product or another one"
            )
        if expected_version is not None:
            if current is None:
                raise NotFound(
                    f"agent {definition.name!r} not found in project {project_id!r} "
                    f"(expected_version {expected_version} given)"
                )
            if current["version"] != expected_version:
                raise Aborted(
                    f"agent {definition.name!r} is at version {current['version']}, "
                    f"not {expected_version}; read it again and retry"
                )
        if definition.is_default:
            await conn.execute(
                "UPDATE kb.agent_definitions SET is_default = false, updated_at = now() "
                "WHERE project_id = $1 AND is_default AND name <> $2",
                project_id,
                definition.name,
            )
        link = product_id if product_id is not None else (current and current["product_id"])
        row = await conn.fetchrow(
            """
            INSERT INTO kb.agent_definitions AS d (
                project_id, name, description, system_prompt, model, tools, flow_type,
                sub_agents, max_iterations, max_steps, default_timeout_s, visibility,
                is_default, tags, trigger, config, product_id, output_schema, streaming)
            VALUES ($1, $2, $3, $4, $5::jsonb, $6::text[], $7, $8::text[], $9, $10, $11, $12,
                    $13, $14::text[], $15, $16::jsonb, $17::uuid, $18::jsonb, $19)
            ON CONFLICT (project_id, name) DO UPDATE SET
                description = excluded.description, system_prompt = excluded.system_prompt,
                model = excluded.model, tools = excluded.tools, flow_type = excluded.flow_type,
                sub_agents = excluded.sub_agents, max_iterations = excluded.max_iterations,
                max_steps = excluded.max_steps, default_timeout_s = excluded.default_timeout_s,
                visibility = excluded.visibility, is_default = excluded.is_default,
                tags = excluded.tags, trigger = excluded.trigger, config = excluded.config,
                product_id = excluded.product_id, output_schema = excluded.output_schema,
                streaming = excluded.streaming, version = d.version + 1, updated_at = now()
            RETURNING id
            """,
            project_id,
            definition.name,
            definition.description,
            definition.system_prompt,
            definition.model.to_json(),
            list(definition.tools),
            definition.flow_type,
            list(definition.sub_agents),
            definition.max_iterations,
            definition.max_steps,
            definition.default_timeout_s,
            definition.visibility,
            definition.is_default,
            list(definition.tags),
            definition.trigger,
            dict(definition.config),
            link,
            definition.output_schema,
            definition.streaming,
        )
        (stored,) = await self._select(conn, project_id, "d.id = $2::uuid", row["id"])
        return UpsertResult(definition=stored, created=current is None)

    async def delete(self, project_id: str, name: str) -> None:
        """Deletes the definition; :class:`NotFound` naming the agent if it does not exist."""
        if not await delete_named(self._pool, "kb.agent_definitions", project_id, name):
            raise NotFound(f"agent {name!r} not found in project {project_id!r}")

    async def remove_unlisted_in(
        self,
        conn: asyncpg.Connection,
        project_id: str,
        product_id: uuid.UUID,
        keep: Sequence[str],
    ) -> builtins.list[str]:
        """Deletes the product's definitions ``keep`` does not name, on the caller's
        connection; their names (``keep`` empty: all of them, as at uninstall)."""
        return await delete_product_rows(conn, "kb.agent_definitions", project_id, product_id, keep)

    async def _select(
        self,
        db: asyncpg.Pool | asyncpg.Connection,
        project_id: str,
        where: str = "true",
        *args: Any,
    ) -> builtins.list[AgentDefinition]:
        """The project's definitions matching ``where`` (its parameters from ``$2``), by name."""
        rows = await db.fetch(
            f"SELECT {_COLUMNS} FROM {_FROM} WHERE d.project_id = $1 AND {where} ORDER BY d.name",
            project_id,
            *args,
        )
        return [definition_from_row(r) for r in rows]
