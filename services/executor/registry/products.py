"""Installed products: install, upgrade and uninstall, each in one transaction.

A product (``kb.products``) owns agent definitions and MCP servers (``product_id`` on
``kb.agent_definitions`` and ``kb.mcp_servers``). Installing a manifest whose product is
already installed upgrades it: definitions and servers are created, updated or removed to
match the new manifest; unchanged ones keep their version. Whenever a product's MCP servers
change, the repository sends ``NOTIFY agentfleet_mcp_servers`` (payload: the project id) in
the same transaction, so toolpools drop their caches exactly when the change is visible.

The MCP server rows are written through :class:`agentfleet.mcp.servers.McpServerRepository`
(the toolpool's repository of the same table) on the install's connection.

A product never takes over a definition or MCP server it does not own: a name already
used by a hand-made one (or by another product) is :class:`AlreadyExists` naming it.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import datetime
from typing import Any

import asyncpg

from agentfleet.egress import EgressPolicy
from agentfleet.errors import AlreadyExists, InvalidArgument, NotFound
from agentfleet.mcp.config import LiteralRefusal
from agentfleet.mcp.servers import McpServerConfig, McpServerRepository
from agentfleet.mcp.stdio import StdioAllowlist
from agentfleet.postgres.project_rows import project_name_page
from agentfleet.postgres.rows import from_row
from agentfleet.request_ids import check_same_request, checked_request_id, request_fingerprint
from agentfleet.settings.trigger_limits import TriggerLimits
from services.executor.registry.definitions import AgentDefinition, DefinitionRepository
from services.executor.registry.manifest import (
    Manifest,
    check_stdio_servers,
    check_url_destinations,
    definition_document,
)
from services.executor.registry.product_store import (
    PRODUCT_COLUMNS,
    lock,
    record_response,
    stored_request,
)
from services.executor.registry.remote_install import (
    checked_remote_agents,
    install_remote_agents,
)
from services.executor.registry.write_checks import checked_manifest, manifest_semantics
from services.executor.triggers.grammar import schedule_config_violations


@dataclass(kw_only=True, slots=True)
class Product:
    """An installed product with the names of what it owns."""

    name: str
    version: str
    description: str = ""
    manifest: dict[str, Any] = field(default_factory=dict)
    installed_at: datetime | None = None
    updated_at: datetime | None = None
    agent_names: list[str] = field(default_factory=list)
    mcp_server_names: list[str] = field(default_factory=list)


@dataclass(kw_only=True, slots=True)
class InstallResult:
    """What an install changed (or, with validate_only, would change)."""

    product: Product
    previous_version: str = ""
    """Version installed before; "" for a first install."""
    created_agent_names: list[str] = field(default_factory=list)
    updated_agent_names: list[str] = field(default_factory=list)
    removed_agent_names: list[str] = field(default_factory=list)
    upserted_mcp_server_names: list[str] = field(default_factory=list)
    removed_mcp_server_names: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """JSON form, stored for request_id replays."""
        document = asdict(self)
        for key in _PRODUCT_TIMES:
            document["product"][key] = _iso(document["product"][key])
        return document

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> InstallResult:
        product = dict(document["product"])
        for key in _PRODUCT_TIMES:
            product[key] = datetime.fromisoformat(product[key]) if product[key] else None
        return cls(**{**document, "product": Product(**product)})

    def changes(self) -> dict[str, Any]:
        """Every field but ``product``: the names changed (and the previous version)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "product"}


_PRODUCT_TIMES = ("installed_at", "updated_at")
"""The datetimes of a product, ISO strings in the stored JSON form."""


@dataclass(frozen=True, kw_only=True, slots=True)
class UninstallResult:
    removed_agent_names: list[str]
    removed_mcp_server_names: list[str]


class _Rollback(Exception):
    """Ends a validate_only transaction after the result is known."""

    def __init__(self, result: InstallResult) -> None:
        super().__init__("validate_only")
        self.result = result


class ProductRegistry:
    """Installs, upgrades, lists and uninstalls the products of a project."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        definitions: DefinitionRepository | None = None,
        *,
        stdio_allowlist: StdioAllowlist = (),
        mcp_url_refusal: LiteralRefusal | None = None,
        schedule_min_interval_s: int = TriggerLimits().schedule_min_interval_s,
    ) -> None:
        self._schedule_min_interval_s = schedule_min_interval_s
        """AGENTFLEET_SCHEDULE_MIN_INTERVAL_S, for the agents' config.schedule."""
        self._stdio_allowlist = stdio_allowlist
        """Command lines a product's stdio MCP servers may run (AGENTFLEET_MCP_STDIO_ALLOWLIST)."""
        self._mcp_url_refusal = mcp_url_refusal or EgressPolicy().literal_refusal
        """Why an MCP server URL host is refused as written: the toolpool's egress policy
        (AGENTFLEET_MCP_ALLOWED_NETWORKS); by default only public destinations pass."""
        self._pool = pool
        self._definitions = definitions or DefinitionRepository(pool)
        self._servers = McpServerRepository(pool)

    async def install(
        self,
        project_id: str,
        document: Mapping[str, Any],
        *,
        request_id: str = "",
        validate_only: bool = False,
    ) -> InstallResult:
        """Installs or upgrades the product of ``document`` in one transaction.

        :class:`InvalidArgument` lists every manifest error by field path and stores
        nothing; :class:`AlreadyExists` names definitions or MCP servers of the project
        the product does not own. A ``request_id`` seen before returns the first result, or
        is :class:`InvalidArgument` naming it when the manifest is not the first one.
        ``validate_only`` does all the work and checks, then rolls it back.
        """
        checked_request_id(request_id)
        manifest = await checked_manifest(document)
        check_url_destinations(manifest, self._mcp_url_refusal)
        check_stdio_servers(manifest, self._stdio_allowlist)
        manifest = checked_remote_agents(manifest, self._mcp_url_refusal)
        too_often = [
            violation
            for i, agent in enumerate(manifest.agents)
            for violation in schedule_config_violations(
                agent.config, f"manifest.agents[{i}]", min_interval_s=self._schedule_min_interval_s
            )
        ]
        if too_often:
            raise InvalidArgument.for_fields(too_often)
        # validate_only is not part of what the request asks: a validation under a used
        # request_id answers (or is refused) as the install itself would be.
        fingerprint = request_fingerprint(manifest.document)
        try:
            async with self._pool.acquire() as conn, conn.transaction():
                if request_id:
                    await lock(conn, f"install-request:{project_id}/{request_id}")
                    stored = await stored_request(conn, project_id, request_id)
                    if stored is not None:
                        check_same_request(stored.request_fingerprint, fingerprint)
                        return InstallResult.from_json(stored.response)
                result = await self._install_in(conn, project_id, manifest)
                if validate_only:
                    raise _Rollback(result)
                if request_id:
                    await record_response(
                        conn, project_id, request_id, manifest.name, result.to_json(), fingerprint
                    )
                return result
        except _Rollback as done:
            return done.result

    async def _install_in(
        self, conn: asyncpg.Connection, project_id: str, manifest: Manifest
    ) -> InstallResult:
        await lock(conn, f"product:{project_id}/{manifest.name}")
        previous = await conn.fetchrow(
            "SELECT id, version FROM kb.products WHERE project_id = $1 AND name = $2 FOR UPDATE",
            project_id,
            manifest.name,
        )
        owner: uuid.UUID | None = previous["id"] if previous else None
        definitions = await self._definitions.list_all_in(conn, project_id)
        servers = {
            s.name: s
            for s in await self._servers.list_all(project_id, enabled_only=False, conn=conn)
        }
        _check_ownership(project_id, manifest, owner, definitions, servers)
        others = [name for name, d in definitions.items() if owner is None or d.product_id != owner]
        violations = await manifest_semantics(manifest, others)
        if violations:
            raise InvalidArgument.for_fields(violations)

        row = await conn.fetchrow(
            f"""
            INSERT INTO kb.products AS p (project_id, name, version, manifest)
            VALUES ($1, $2, $3, $4::jsonb)
            ON CONFLICT (project_id, name) DO UPDATE SET
                version = excluded.version, manifest = excluded.manifest, updated_at = now()
            RETURNING {PRODUCT_COLUMNS}
            """,
            project_id,
            manifest.name,
            manifest.version,
            manifest.document,
        )
        product_id: uuid.UUID = row["id"]
        result = InstallResult(
            product=Product(
                name=manifest.name,
                version=manifest.version,
                description=manifest.description,
                manifest=manifest.document,
                installed_at=row["installed_at"],
                updated_at=row["updated_at"],
                agent_names=sorted(a.name for a in manifest.agents),
                mcp_server_names=sorted(s.name for s in manifest.mcp_servers),
            ),
            previous_version=previous["version"] if previous else "",
        )
        for agent in manifest.agents:
            current = definitions.get(agent.name)
            if current is not None and definition_document(current) == definition_document(agent):
                continue  # unchanged: keep its version
            await self._definitions.upsert_in(conn, project_id, agent, product_id=product_id)
            names = result.created_agent_names if current is None else result.updated_agent_names
            names.append(agent.name)
        result.removed_agent_names = await self._definitions.remove_unlisted_in(
            conn, project_id, product_id, [a.name for a in manifest.agents]
        )
        for server in manifest.mcp_servers:
            wanted = replace(server, project_id=project_id, product_id=str(product_id))
            current_server = servers.get(server.name)
            if current_server is None or not current_server.configures_as(wanted):
                await self._servers.upsert(wanted, take_over=False, conn=conn)
                result.upserted_mcp_server_names.append(server.name)
        result.removed_mcp_server_names = await self._servers.remove_unlisted(
            conn, project_id, product_id, [s.name for s in manifest.mcp_servers]
        )
        await install_remote_agents(conn, project_id, str(product_id), manifest, definitions)
        return result

    async def uninstall(self, project_id: str, product_name: str) -> UninstallResult:
        """Removes the product with its definitions and MCP servers in one transaction.

        :class:`NotFound` when the product is not installed. Runs keep their history
        (their definition link becomes NULL).
        """
        async with self._pool.acquire() as conn, conn.transaction():
            await lock(conn, f"product:{project_id}/{product_name}")
            product_id = await conn.fetchval(
                "SELECT id FROM kb.products WHERE project_id = $1 AND name = $2 FOR UPDATE",
                project_id,
                product_name,
            )
            if product_id is None:
                raise NotFound(
                    f"product {product_name!r} is not installed in project {project_id!r}"
                )
            agents = await self._definitions.remove_unlisted_in(conn, project_id, product_id, [])
            servers = await self._servers.remove_unlisted(conn, project_id, product_id, [])
            await conn.execute(
                "DELETE FROM kb.products WHERE project_id = $1 AND id = $2::uuid",
                project_id,
                product_id,
            )
        return UninstallResult(removed_agent_names=agents, removed_mcp_server_names=servers)

    async def list_products(
        self, project_id: str, *, page_size: int = 0, page_token: str = ""
    ) -> tuple[list[Product], str]:
        """One page of the installed products by name, and the next page token ('' at the end)."""
        page, token = await project_name_page(
            self._pool,
            f"""
            SELECT {PRODUCT_COLUMNS},
                ARRAY(SELECT d.name FROM kb.agent_definitions d
                      WHERE d.project_id = p.project_id AND d.product_id = p.id
                      ORDER BY d.name) AS agent_names,
                ARRAY(SELECT s.name FROM kb.mcp_servers s
                      WHERE s.project_id = p.project_id AND s.product_id = p.id
                      ORDER BY s.name) AS mcp_server_names
            FROM kb.products p""",
            alias="p",
            project_id=project_id,
            page_size=page_size,
            page_token=page_token,
            listing="products",
        )
        return [
            from_row(
                Product,
                r,
                description=str(r["manifest"].get("description", "")),
                agent_names=list(r["agent_names"]),
                mcp_server_names=list(r["mcp_server_names"]),
            )
            for r in page
        ], token


def _check_ownership(
    project_id: str,
    manifest: Manifest,
    owner: uuid.UUID | None,
    definitions: Mapping[str, AgentDefinition],
    servers: Mapping[str, McpServerConfig],
) -> None:
    """AlreadyExists naming every definition or server of the manifest owned by others."""
    clashes: list[str] = []
    for agent in manifest.agents:
        current = definitions.get(agent.name)
        if current is not None and (owner is None or current.product_id != owner):
            clashes.append(f"agent definition {agent.name!r} ({_owned_by(current.product_name)})")
    for server in manifest.mcp_servers:
        stored = servers.get(server.name)
        if stored is not None and (owner is None or stored.product_id != str(owner)):
            clashes.append(f"MCP server {server.name!r} ({_owned_by(stored.product_name)})")
    if clashes:
        raise AlreadyExists(
            f"product {manifest.name!r} cannot take over what already exists in project "
            f"{project_id!r}: {', '.join(clashes)}; delete or rename it first"
        )


def _owned_by(product_name: str) -> str:
    return f"installed by product {product_name!r}" if product_name else "created by hand"


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None
