"""McpServerStore and SecretStore on a real PostgreSQL."""

from __future__ import annotations

import asyncio
import dataclasses

import asyncpg
import pytest

from agentfleet.errors import InvalidArgument, NotFound
from agentfleet.mcp.servers import McpServerConfig
from agentfleet.postgres.db import Listener
from agentfleet.secrets.project_secrets import ProjectSecretRepository
from agentfleet.secrets.secrets_crypto import SecretsKeyring
from services.toolpool.mcp import CHANGES_CHANNEL, McpServerStore, SecretStore

KEYRING = SecretsKeyring([("test-1", bytes(range(32)))])

STDIO = McpServerConfig(
    project_id="proj-a",
    name="files",
    transport="stdio",
    command="mcp-files",
    args=("--root", "${ROOT}"),
    env={"TOKEN": "${TOKEN}"},
)


async def count(pool: asyncpg.Pool, table: str) -> int:
    return await pool.fetchval(f"SELECT count(*) FROM kb.{table}")


async def test_upsert_creates_then_replaces_and_keeps_references(db_pool: asyncpg.Pool) -> None:
    store = McpServerStore(db_pool)
    stored, created = await store.upsert(STDIO)
    assert created
    assert stored.id
    assert stored.created_at
    assert stored.updated_at
    assert stored.args == ("--root", "${ROOT}")
    assert stored.env == {"TOKEN": "${TOKEN}"}
    assert stored.tool_prefix is None
    assert stored.enabled

    changed, created = await store.upsert(dataclasses.replace(STDIO, tool_prefix="", enabled=False))
    assert not created
    assert changed.id == stored.id
    assert changed.tool_prefix == ""
    assert not changed.enabled
    assert changed.updated_at >= stored.updated_at
    assert await store.get("proj-a", "files") == changed


async def test_invalid_config_names_the_field_and_stores_nothing(db_pool: asyncpg.Pool) -> None:
    store = McpServerStore(db_pool)
    bad = McpServerConfig(
        project_id="proj-a", name="api", transport="streamable_http", url="ftp://nope"
    )
    with pytest.raises(InvalidArgument) as caught:
        await store.upsert(bad)
    assert [v.field for v in caught.value.violations] == ["mcp_server.url"]
    with pytest.raises(InvalidArgument) as caught:
        await store.upsert(dataclasses.replace(STDIO, command=None, connect_timeout_s=0))
    assert {v.field for v in caught.value.violations} == {
        "mcp_server.command",
        "mcp_server.connect_timeout",
    }
    assert await count(db_pool, "mcp_servers") == 0


async def test_every_query_is_scoped_by_project(db_pool: asyncpg.Pool) -> None:
    store = McpServerStore(db_pool)
    await store.upsert(STDIO)
    with pytest.raises(NotFound):
        await store.get("proj-b", "files")
    with pytest.raises(NotFound):
        await store.delete("proj-b", "files")
    assert await store.list("proj-b") == ([], "")
    assert await store.list_all("proj-b") == []
    await store.delete("proj-a", "files")
    with pytest.raises(NotFound):
        await store.get("proj-a", "files")


async def test_list_pages_by_name_and_list_all_filters_disabled(db_pool: asyncpg.Pool) -> None:
    store = McpServerStore(db_pool)
    for name in ("c", "a", "d", "b"):
        await store.upsert(dataclasses.replace(STDIO, name=name, enabled=name != "d"))
    first, token = await store.list("proj-a", page_size=3)
    assert [s.name for s in first] == ["a", "b", "c"]
    rest, token2 = await store.list("proj-a", page_size=3, page_token=token)
    assert [s.name for s in rest] == ["d"]
    assert token2 == ""
    assert [s.name for s in await store.list_all("proj-a")] == ["a", "b", "c"]
    assert len(await store.list_all("proj-a", enabled_only=False)) == 4
    with pytest.raises(InvalidArgument):
        await store.list("proj-other", page_token=token)


async def test_a_page_token_of_one_list_is_refused_by_another(db_pool: asyncpg.Pool) -> None:
    """Same project, same keyset (names): the token still names its list, so a caller cannot
    page the project's secrets from where its MCP servers' listing stopped."""
    store = McpServerStore(db_pool)
    for name in ("a", "b"):
        await store.upsert(dataclasses.replace(STDIO, name=name))
    _, token = await store.list("proj-a", page_size=1)
    assert token

    with pytest.raises(InvalidArgument):
        await ProjectSecretRepository(db_pool).list_names("proj-a", page_token=token)


async def test_product_must_belong_to_the_project(db_pool: asyncpg.Pool) -> None:
    product_id = await db_pool.fetchval(
        """INSERT INTO kb.products (project_id, name, version, manifest)
           VALUES ('proj-b', 'kit', '1', '{}'::jsonb) RETURNING id::text"""
    )
    store = McpServerStore(db_pool)
    with pytest.raises(NotFound):
        await store.upsert(dataclasses.replace(STDIO, product_id=product_id))
    stored, _ = await store.upsert(
        dataclasses.replace(STDIO, project_id="proj-b", product_id=product_id)
    )
    assert stored.product_name == "kit"


async def test_secrets_never_come_back_except_through_resolve(db_pool: asyncpg.Pool) -> None:
    secrets = SecretStore(db_pool, KEYRING)
    info, created = await secrets.set("proj-a", "TOKEN", "s3cret-value")
    assert created
    assert info.name == "TOKEN"
    info, created = await secrets.set("proj-a", "TOKEN", "rotated-value")
    assert not created
    await secrets.set("proj-a", "ROOT", "/data")
    await secrets.set("proj-b", "TOKEN", "other-project")
    listed, token = await secrets.list("proj-a")
    assert [s.name for s in listed] == ["ROOT", "TOKEN"]
    assert token == ""
    assert "rotated-value" not in repr(listed)
    assert await secrets.resolve("proj-a") == {"TOKEN": "rotated-value", "ROOT": "/data"}
    await secrets.delete("proj-a", "ROOT")
    with pytest.raises(NotFound):
        await secrets.delete("proj-a", "ROOT")
    assert await secrets.resolve("proj-a") == {"TOKEN": "rotated-value"}


@pytest.mark.parametrize(
    ("name", "value", "field"),
    [
        ("1BAD", "v", "name"),
        ("has-dash", "v", "name"),
        ("OK", "", "value"),
        ("OK", "a\0b", "value"),
    ],
)
async def test_bad_secret_names_the_field(
    db_pool: asyncpg.Pool, name: str, value: str, field: str
) -> None:
    with pytest.raises(InvalidArgument) as caught:
        await SecretStore(db_pool, KEYRING).set("proj-a", name, value)
    assert [v.field for v in caught.value.violations] == [field]
    assert await count(db_pool, "project_secrets") == 0


async def test_changes_notify_the_project(db_pool: asyncpg.Pool, database_url: str) -> None:
    queue: asyncio.Queue = asyncio.Queue()
    async with Listener(database_url) as listener:
        await listener.subscribe(CHANGES_CHANNEL, queue)
        store, secrets = McpServerStore(db_pool), SecretStore(db_pool, KEYRING)
        await store.upsert(STDIO)
        await secrets.set("proj-a", "TOKEN", "v")
        await store.delete("proj-a", "files")
        payloads = [(await asyncio.wait_for(queue.get(), timeout=5)).payload for _ in range(3)]
    assert payloads == ["proj-a"] * 3
