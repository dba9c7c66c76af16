"""agentfleet.mcp.servers: the one repository of kb.mcp_servers, as both services use it."""

from __future__ import annotations

import dataclasses

import asyncpg
import pytest

from agentfleet.errors import AlreadyExists
from agentfleet.mcp.servers import McpServerConfig, McpServerRepository
from agentfleet.postgres.project_rows import delete_named
from services.executor.registry.products import ProductRegistry
from services.toolpool.mcp import McpServerStore

MANIFEST = {
    "name": "kit",
    "version": "1",
    "mcp": {"servers": [{"name": "web", "transport": "stdio", "command": "python"}]},
}


async def product_id(pool: asyncpg.Pool, project_id: str, name: str) -> str:
    return await pool.fetchval(
        "INSERT INTO kb.products (project_id, name, version, manifest) "
        "VALUES ($1, $2, '1', '{}'::jsonb) RETURNING id::text",
        project_id,
        name,
    )


async def test_a_product_server_reads_back_as_the_toolpool_stores_it(
    db_pool: asyncpg.Pool,
) -> None:
    registry = ProductRegistry(db_pool, stdio_allowlist=(("python",),))
    await registry.install("p", MANIFEST)
    (server,) = await McpServerStore(db_pool).list_all("p")
    assert (server.name, server.command, server.product_name) == ("web", "python", "kit")
    assert server.connect_timeout_s == 10.0
    assert server.args == ()
    # Installed again unchanged: the stored row still configures what the manifest says.
    again = await registry.install("p", MANIFEST)
    assert again.upserted_mcp_server_names == []
    assert await McpServerStore(db_pool).get("p", "web") == server


async def test_take_over_false_replaces_only_the_products_own_server(
    db_pool: asyncpg.Pool,
) -> None:
    repository = McpServerRepository(db_pool)
    mine, other = await product_id(db_pool, "p", "mine"), await product_id(db_pool, "p", "other")
    config = McpServerConfig(
        project_id="p", name="s", transport="stdio", command="a", product_id=mine
    )
    stored, created = await repository.upsert(config, take_over=False)
    assert created
    changed, created = await repository.upsert(
        dataclasses.replace(config, command="b"), take_over=False
    )
    assert not created
    assert changed.command == "b"
    assert changed.configures_as(dataclasses.replace(stored, command="b"))
    with pytest.raises(AlreadyExists, match="'s'"):
        await repository.upsert(dataclasses.replace(config, product_id=other), take_over=False)
    # The toolpool's write (take_over by default) may move it.
    moved, _ = await repository.upsert(dataclasses.replace(config, product_id=other))
    assert moved.product_name == "other"


async def test_remove_unlisted_deletes_only_the_products_rows_not_kept(
    db_pool: asyncpg.Pool,
) -> None:
    repository = McpServerRepository(db_pool)
    kit = await product_id(db_pool, "p", "kit")
    for name, owner in (("a", kit), ("b", kit), ("c", None)):
        await repository.upsert(
            McpServerConfig(
                project_id="p", name=name, transport="stdio", command="x", product_id=owner
            )
        )
    async with db_pool.acquire() as conn, conn.transaction():
        assert await repository.remove_unlisted(conn, "p", kit, ["a"]) == ["b"]
        assert await repository.remove_unlisted(conn, "p", kit, []) == ["a"]
    assert [s.name for s in await repository.list_all("p")] == ["c"]


async def test_statements_name_only_known_tables(db_pool: asyncpg.Pool) -> None:
    with pytest.raises(ValueError, match="agent_runs"):
        await delete_named(db_pool, "kb.agent_runs", "p", "x")
