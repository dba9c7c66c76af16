"""AgentRegistryService through real gRPC on loopback, real tokens and a real database."""

import asyncio
import copy
import ipaddress
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import pytest
from google.protobuf import json_format, struct_pb2

from agentfleet.auth import TokenAuthenticator, TokenStore
from agentfleet.egress import EgressPolicy
from agentfleet.errors import AlreadyExists
from agentfleet.mcp.config import HIDDEN_VALUE
from agentfleet.mcp.servers import CHANGES_CHANNEL, McpServerConfig, McpServerRepository
from agentfleet.postgres.db import Listener, Notification
from agentfleet.rpc.clients import open_channel
from agentfleet.rpc.grpc_server import Registration, start_server
from agentfleet.testing.checks.snapshots import table_rows
from agentfleet.testing.rpc_errors import assert_reused_request_id, field_violations, rpc_error
from agentfleet.testing.stdio_allowlist import TEST_STDIO_COMMANDS
from agentfleet.v1 import common_pb2, registry_pb2, registry_pb2_grpc
from services.executor.model.budgets import BudgetStore
from services.executor.registry.definitions import AgentDefinition, DefinitionRepository
from services.executor.registry.products import ProductRegistry
from services.executor.registry.remote_agents import RemoteAgentRepository
from services.executor.registry.remote_registry import RemoteAgentRegistry
from services.executor.registry.server import AgentRegistryServicer
from services.toolpool.mcp.store import SecretStore

EXAMPLE = Path(__file__).parents[2] / "examples/products/research/manifest.json"
ADMIN_METHODS = (
    "InstallProduct",
    "UninstallProduct",
    "UpsertAgentDefinition",
    "DeleteAgentDefinition",
)
LOOPBACK = (ipaddress.ip_network("127.0.0.1/32"),)
AGENTS = ["data-analyst", "paper-summarizer", "research-assistant", "web-browser"]


@dataclass
class Registry:
    stub: registry_pb2_grpc.AgentRegistryServiceStub
    beta: registry_pb2_grpc.AgentRegistryServiceStub
    """Signed in to project beta."""
    member: registry_pb2_grpc.AgentRegistryServiceStub
    """A member (not admin) of project alpha."""
    pool: asyncpg.Pool


@pytest.fixture
async def registry(db_pool: asyncpg.Pool) -> AsyncIterator[Registry]:
    tokens = TokenStore(db_pool)
    definitions = DefinitionRepository(db_pool)
    server = await start_server(
        host="127.0.0.1",
        port=0,
        registrations=[
            Registration.of(
                registry_pb2,
                registry_pb2_grpc,
                "AgentRegistryService",
                AgentRegistryServicer(
                    ProductRegistry(
                        db_pool,
                        definitions,
                        stdio_allowlist=TEST_STDIO_COMMANDS,
                        # As the test stack's AGENTFLEET_MCP_ALLOWED_NETWORKS: loopback only.
                        mcp_url_refusal=EgressPolicy(allowed_networks=LOOPBACK).literal_refusal,
                    ),
                    definitions,
                    BudgetStore(db_pool),
                    RemoteAgentRegistry(
                        repository=RemoteAgentRepository(db_pool),
                        egress=EgressPolicy(allowed_networks=LOOPBACK),
                        secrets=SecretStore(db_pool).resolve,
                    ),
                ),
                admin_methods=ADMIN_METHODS,
            )
        ],
        authenticator=TokenAuthenticator(tokens, ttl_s=0),
    )
    address = f"127.0.0.1:{server.port}"
    alpha = await tokens.create(project_id="alpha", role="admin")
    beta = await tokens.create(project_id="beta", role="admin")
    member = await tokens.create(project_id="alpha", role="member")
    channels = [open_channel(address, token=t.token) for t in (alpha, beta, member)]
    try:
        yield Registry(*(registry_pb2_grpc.AgentRegistryServiceStub(c) for c in channels), db_pool)
    finally:
        for channel in channels:
            await channel.close()
        await server.stop(0)


def example() -> dict[str, Any]:
    return json.loads(EXAMPLE.read_text())


def install_request(
    document: dict[str, Any], project_id: str = "alpha", **fields: Any
) -> registry_pb2.InstallProductRequest:
    manifest = json_format.ParseDict(document, struct_pb2.Struct())
    return registry_pb2.InstallProductRequest(project_id=project_id, manifest=manifest, **fields)


INSTALL_TABLES = ("products", "agent_definitions", "mcp_servers", "product_install_requests")
"""Every table an install writes."""


async def stored_counts(pool: asyncpg.Pool, project: str = "alpha") -> tuple[int, int, int]:
    return (
        await pool.fetchval("SELECT count(*) FROM kb.products WHERE project_id = $1", project),
        await pool.fetchval(
            "SELECT count(*) FROM kb.agent_definitions WHERE project_id = $1", project
        ),
        await pool.fetchval("SELECT count(*) FROM kb.mcp_servers WHERE project_id = $1", project),
    )


async def names(stub: Any, project_id: str = "alpha", **fields: Any) -> list[str]:
    request = registry_pb2.ListAgentDefinitionsRequest(project_id=project_id, **fields)
    reply = await stub.ListAgentDefinitions(request)
    return [d.name for d in reply.agent_definitions]


async def test_install_stores_definitions_and_mcp_servers_and_notifies_toolpools(
    registry: Registry, database_url: str
) -> None:
    notifications: asyncio.Queue[Notification] = asyncio.Queue()
    async with Listener(database_url) as listener:
        await listener.subscribe(CHANGES_CHANNEL, notifications)
        reply = await registry.stub.InstallProduct(install_request(example()))
        received = await asyncio.wait_for(notifications.get(), timeout=5)
    assert received.payload == "alpha"
    assert sorted(reply.created_agent_names) == AGENTS
    assert list(reply.upserted_mcp_server_names) == ["web"]
    assert reply.previous_version == ""
    assert reply.product.version == "1.0.0"
    assert list(reply.product.mcp_server_names) == ["web"]

    got = await registry.stub.GetAgentDefinition(
        registry_pb2.GetAgentDefinitionRequest(project_id="alpha", name="web-browser")
    )
    browser = got.agent_definition
    assert list(browser.tools) == ["web__web_search", "web__web_fetch"]
    assert browser.model.name == "gemini-2.5-flash"
    assert browser.model.temperature == pytest.approx(0.2)
    assert browser.max_steps == 20
    assert browser.default_timeout.seconds == 180
    assert browser.product_name == "research"
    assert browser.version == 1
    assert browser.visibility == common_pb2.VISIBILITY_PROJECT
    server = await registry.pool.fetchrow(
        "SELECT s.transport, s.command, s.args, p.name AS product FROM kb.mcp_servers s "
        "JOIN kb.products p ON p.id = s.product_id WHERE s.project_id = 'alpha'"
    )
    assert dict(server) == {
        "transport": "stdio",
        "command": "python",
        "args": ["examples/mcp/offline_web/server.py"],
        "product": "research",
    }
    products = await registry.stub.ListProducts(
        registry_pb2.ListProductsRequest(project_id="alpha")
    )
    (product,) = products.products
    assert sorted(product.agent_names) == AGENTS
    assert json_format.MessageToDict(product.manifest)["name"] == "research"


async def test_a_new_version_updates_changed_parts_and_drops_what_it_no_longer_has(
    registry: Registry,
) -> None:
    await registry.stub.InstallProduct(install_request(example()))
    v2 = example()
    v2["version"] = "2.0.0"
    v2["agents"] = [a for a in v2["agents"] if a["name"] != "data-analyst"]
    v2["agents"][1]["system_prompt"] = "Search the web. Be brief."
    v2["mcp"]["servers"] = [
        {"name": "search", "transport": "streamable_http", "url": "http://127.0.0.1:1/mcp"}
    ]
    reply = await registry.stub.InstallProduct(install_request(v2))
    assert reply.previous_version == "1.0.0"
    assert list(reply.created_agent_names) == []
    assert list(reply.updated_agent_names) == ["web-browser"]
    assert list(reply.removed_agent_names) == ["data-analyst"]
    assert list(reply.upserted_mcp_server_names) == ["search"]
    assert list(reply.removed_mcp_server_names) == ["web"]

    versions = dict(
        await registry.pool.fetch(
            "SELECT name, version FROM kb.agent_definitions WHERE project_id = 'alpha'"
        )
    )
    assert versions == {"research-assistant": 1, "paper-summarizer": 1, "web-browser": 2}
    servers = await registry.pool.fetch("SELECT name, url FROM kb.mcp_servers")
    assert [tuple(r) for r in servers] == [("search", "http://127.0.0.1:1/mcp")]
    assert await registry.pool.fetchval("SELECT version FROM kb.products") == "2.0.0"


async def test_reinstalling_the_same_manifest_changes_nothing(registry: Registry) -> None:
    await registry.stub.InstallProduct(install_request(example()))
    again = await registry.stub.InstallProduct(install_request(example()))
    assert again.previous_version == "1.0.0"
    assert list(again.created_agent_names) == list(again.updated_agent_names) == []
    assert list(again.upserted_mcp_server_names) == []
    assert await registry.pool.fetchval("SELECT max(version) FROM kb.agent_definitions") == 1


async def test_uninstall_removes_definitions_and_servers_but_not_hand_made_ones(
    registry: Registry, database_url: str
) -> None:
    await registry.stub.InstallProduct(install_request(example()))
    await registry.stub.UpsertAgentDefinition(
        registry_pb2.UpsertAgentDefinitionRequest(
            project_id="alpha",
            agent_definition=common_pb2.AgentDefinition(
                name="mine", model=common_pb2.ModelConfig(name="gemini-2.5-flash")
            ),
        )
    )
    notifications: asyncio.Queue[Notification] = asyncio.Queue()
    async with Listener(database_url) as listener:
        await listener.subscribe(CHANGES_CHANNEL, notifications)
        reply = await registry.stub.UninstallProduct(
            registry_pb2.UninstallProductRequest(project_id="alpha", product_name="research")
        )
        assert (await asyncio.wait_for(notifications.get(), timeout=5)).payload == "alpha"
    assert list(reply.removed_agent_names) == AGENTS
    assert list(reply.removed_mcp_server_names) == ["web"]
    assert await stored_counts(registry.pool) == (0, 1, 0)
    error = await rpc_error(
        registry.stub.UninstallProduct(
            registry_pb2.UninstallProductRequest(project_id="alpha", product_name="research")
        )
    )
    assert error.code() == grpc.StatusCode.NOT_FOUND
    assert "research" in (error.details() or "")


async def test_manifest_errors_name_their_fields_and_store_nothing(registry: Registry) -> None:
    bad = example()
    bad["agents"][2]["flow_type"] = "loopy"
    bad["mcp"]["servers"][0].pop("command")
    bad["agents"][0]["sub_agents"] = ["nobody"]
    error = await rpc_error(registry.stub.InstallProduct(install_request(bad)))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field_violations(error) == {
        "manifest.agents[2].flow_type": (
            "'loopy' is not one of ['single', 'sequential', 'loop', 'parallel']"
        ),
        "manifest.mcp.servers[0].command": "is required for the stdio transport",
    }
    assert "manifest.agents[2].flow_type" in (error.details() or "")

    # Schema-valid but naming an agent neither the manifest nor the project has.
    unknown = example()
    unknown["agents"].append(
        {"name": "pipeline", "model": {"name": "m"}, "flow_type": "sequential",
         "sub_agents": ["web-browser", "nobody"]}
    )  # fmt: skip
    error = await rpc_error(registry.stub.InstallProduct(install_request(unknown)))
    assert field_violations(error) == {
        "manifest.agents[4].sub_agents[1]": (
            "names no agent of the manifest or the project: 'nobody'"
        )
    }
    assert await stored_counts(registry.pool) == (0, 0, 0)


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.5/mcp",
        "http://metadata.google.internal/",
    ],
)
async def test_a_product_mcp_url_to_a_refused_destination_is_refused_before_anything_is_written(
    registry: Registry, url: str
) -> None:
    # The toolpool's UpsertMcpServer refuses these URLs when saved; InstallProduct writes
    # the same table and must refuse them too (it once stored them).
    product = example()
    product["mcp"]["servers"].append({"name": "meta", "transport": "sse", "url": url})
    error = await rpc_error(registry.stub.InstallProduct(install_request(product)))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    violations = field_violations(error)
    assert list(violations) == ["manifest.mcp.servers[1].url"]
    assert violations["manifest.mcp.servers[1].url"].startswith("refused destination: ")
    assert await stored_counts(registry.pool) == (0, 0, 0)


async def test_a_hand_made_definition_or_server_is_never_taken_over(registry: Registry) -> None:
    await registry.stub.UpsertAgentDefinition(
        registry_pb2.UpsertAgentDefinitionRequest(
            project_id="alpha",
            agent_definition=common_pb2.AgentDefinition(
                name="web-browser", model=common_pb2.ModelConfig(name="gemini-2.5-flash")
            ),
        )
    )
    await registry.pool.execute(
        "INSERT INTO kb.mcp_servers (project_id, name, transport, url) "
        "VALUES ('alpha', 'web', 'sse', 'http://127.0.0.1:1/sse')"
    )
    error = await rpc_error(registry.stub.InstallProduct(install_request(example())))
    assert error.code() == grpc.StatusCode.ALREADY_EXISTS
    details = error.details() or ""
    assert "agent definition 'web-browser' (created by hand)" in details
    assert "MCP server 'web' (created by hand)" in details
    assert await stored_counts(registry.pool) == (0, 1, 1)


async def test_validate_only_reports_the_changes_and_writes_nothing(registry: Registry) -> None:
    reply = await registry.stub.InstallProduct(install_request(example(), validate_only=True))
    assert sorted(reply.created_agent_names) == AGENTS
    assert list(reply.upserted_mcp_server_names) == ["web"]
    assert await stored_counts(registry.pool) == (0, 0, 0)


async def test_a_repeated_request_id_returns_the_first_result_of_the_same_manifest_only(
    registry: Registry,
) -> None:
    first = await registry.stub.InstallProduct(install_request(example(), request_id="req-1"))
    before = await table_rows(registry.pool, INSTALL_TABLES)
    v2 = copy.deepcopy(example())
    v2["version"] = "2.0.0"
    for validate_only in (False, True):
        refused = await rpc_error(
            registry.stub.InstallProduct(
                install_request(v2, request_id="req-1", validate_only=validate_only)
            )
        )
        assert_reused_request_id(refused)
    assert await table_rows(registry.pool, INSTALL_TABLES) == before

    for validate_only in (False, True):
        repeat = await registry.stub.InstallProduct(
            install_request(example(), request_id="req-1", validate_only=validate_only)
        )
        assert repeat == first
    assert sorted(first.created_agent_names) == AGENTS
    assert await table_rows(registry.pool, INSTALL_TABLES) == before


async def test_visibility_filters_listings_only_when_asked(registry: Registry) -> None:
    await registry.stub.InstallProduct(install_request(example()))
    await registry.stub.UpsertAgentDefinition(
        registry_pb2.UpsertAgentDefinitionRequest(
            project_id="alpha",
            agent_definition=common_pb2.AgentDefinition(
                name="plumber",
                model=common_pb2.ModelConfig(name="gemini-2.5-flash"),
                visibility=common_pb2.VISIBILITY_INTERNAL,
            ),
        )
    )
    assert await names(registry.stub) == AGENTS
    every = [common_pb2.VISIBILITY_EXTERNAL, common_pb2.VISIBILITY_PROJECT, 3]
    assert await names(registry.stub, visibilities=every) == sorted([*AGENTS, "plumber"])
    assert await names(registry.stub, visibilities=[common_pb2.VISIBILITY_INTERNAL]) == ["plumber"]
    external = [common_pb2.VISIBILITY_EXTERNAL]
    assert await names(registry.stub, visibilities=external) == ["research-assistant"]
    assert await names(registry.stub, visibilities=every, product_name="research") == AGENTS
    # list_available_agents reads every definition, whatever its visibility.
    everything = await DefinitionRepository(registry.pool).list_all("alpha")
    assert [d.name for d in everything] == sorted([*AGENTS, "plumber"])

    first = await registry.stub.ListAgentDefinitions(
        registry_pb2.ListAgentDefinitionsRequest(project_id="alpha", page_size=3)
    )
    assert [d.name for d in first.agent_definitions] == AGENTS[:3]
    second = await registry.stub.ListAgentDefinitions(
        registry_pb2.ListAgentDefinitionsRequest(
            project_id="alpha", page_size=3, page_token=first.next_page_token
        )
    )
    assert [d.name for d in second.agent_definitions] == AGENTS[3:]
    assert second.next_page_token == ""
    error = await rpc_error(
        registry.stub.ListAgentDefinitions(
            registry_pb2.ListAgentDefinitionsRequest(
                project_id="alpha", page_token=first.next_page_token, visibilities=external
            )
        )
    )
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_upsert_get_delete_with_optimistic_versions(registry: Registry) -> None:
    def upsert(expected: int = 0, **fields: Any) -> Any:
        definition = common_pb2.AgentDefinition(
            name="helper", model=common_pb2.ModelConfig(name="gemini-2.5-flash"), **fields
        )
        return registry.stub.UpsertAgentDefinition(
            registry_pb2.UpsertAgentDefinitionRequest(
                project_id="alpha", agent_definition=definition, expected_version=expected
            )
        )

    missing = await rpc_error(upsert(expected=1))
    assert missing.code() == grpc.StatusCode.NOT_FOUND
    created = await upsert(description="v1", tools=["search_*"], is_default=True)
    assert created.created
    assert created.agent_definition.version == 1
    assert created.agent_definition.project_id == "alpha"
    assert created.agent_definition.model.provider == "google"
    updated = await upsert(expected=1, description="v2")
    assert not updated.created
    assert updated.agent_definition.version == 2
    assert list(updated.agent_definition.tools) == []  # a replace sets every field
    stale = await rpc_error(upsert(expected=1, description="v3"))
    assert stale.code() == grpc.StatusCode.ABORTED
    assert "version 2" in (stale.details() or "")

    got = await registry.stub.GetAgentDefinition(
        registry_pb2.GetAgentDefinitionRequest(project_id="alpha", name="helper")
    )
    assert got.agent_definition.description == "v2"

    bad = await rpc_error(
        registry.stub.UpsertAgentDefinition(
            registry_pb2.UpsertAgentDefinitionRequest(
                project_id="alpha",
                agent_definition=common_pb2.AgentDefinition(
                    name="Bad Name", flow_type=common_pb2.FLOW_TYPE_LOOP
                ),
            )
        )
    )
    assert bad.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert set(field_violations(bad)) == {"agent_definition.model.name"}

    await registry.stub.DeleteAgentDefinition(
        registry_pb2.DeleteAgentDefinitionRequest(project_id="alpha", name="helper")
    )
    for call in (
        registry.stub.GetAgentDefinition(
            registry_pb2.GetAgentDefinitionRequest(project_id="alpha", name="helper")
        ),
        registry.stub.DeleteAgentDefinition(
            registry_pb2.DeleteAgentDefinitionRequest(project_id="alpha", name="helper")
        ),
    ):
        error = await rpc_error(call)
        assert error.code() == grpc.StatusCode.NOT_FOUND
        assert "helper" in (error.details() or "")


async def test_setting_is_default_clears_it_elsewhere(registry: Registry) -> None:
    await registry.stub.InstallProduct(install_request(example()))
    await registry.stub.UpsertAgentDefinition(
        registry_pb2.UpsertAgentDefinitionRequest(
            project_id="alpha",
            agent_definition=common_pb2.AgentDefinition(
                name="boss", model=common_pb2.ModelConfig(name="m"), is_default=True
            ),
        )
    )
    default = await DefinitionRepository(registry.pool).default_agent("alpha")
    assert default is not None
    assert default.name == "boss"
    assert (
        await registry.pool.fetchval("SELECT count(*) FROM kb.agent_definitions WHERE is_default")
        == 1
    )


async def test_another_projects_definitions_are_not_found(registry: Registry) -> None:
    await registry.stub.InstallProduct(install_request(example()))
    error = await rpc_error(
        registry.beta.GetAgentDefinition(
            registry_pb2.GetAgentDefinitionRequest(project_id="beta", name="web-browser")
        )
    )
    assert error.code() == grpc.StatusCode.NOT_FOUND
    assert await names(registry.beta, "beta") == []
    denied = await rpc_error(
        registry.beta.GetAgentDefinition(
            registry_pb2.GetAgentDefinitionRequest(project_id="alpha", name="web-browser")
        )
    )
    assert denied.code() == grpc.StatusCode.PERMISSION_DENIED
    # The same product in another project is independent of the first.
    await registry.beta.InstallProduct(install_request(example(), "beta"))
    assert await stored_counts(registry.pool, "beta") == (1, 4, 1)


async def test_members_cannot_change_the_registry(registry: Registry) -> None:
    error = await rpc_error(registry.member.InstallProduct(install_request(example())))
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED
    assert await names(registry.member) == []


async def test_product_writes_refuse_rows_that_appeared_after_the_ownership_check(
    db_pool: asyncpg.Pool,
) -> None:
    # A hand-made definition and server created between the installer's check and its write.

    definitions = DefinitionRepository(db_pool)
    await definitions.upsert("alpha", AgentDefinition(name="raced"))
    await db_pool.execute(
        "INSERT INTO kb.mcp_servers (project_id, name, transport, command) "
        "VALUES ('alpha', 'raced', 'stdio', 'true')"
    )
    product_id = await db_pool.fetchval(
        "INSERT INTO kb.products (project_id, name, version, manifest) "
        "VALUES ('alpha', 'p', '1', '{}'::jsonb) RETURNING id"
    )
    async with db_pool.acquire() as conn:
        with pytest.raises(AlreadyExists, match="raced"):
            await definitions.upsert_in(
                conn, "alpha", AgentDefinition(name="raced"), product_id=product_id
            )
        server = McpServerConfig(
            project_id="alpha",
            name="raced",
            transport="stdio",
            command="python",
            product_id=str(product_id),
        )
        with pytest.raises(AlreadyExists, match="raced"):
            await McpServerRepository(db_pool).upsert(server, take_over=False, conn=conn)
    hand_made = "SELECT count(*) FROM kb.agent_definitions WHERE product_id IS NULL"
    assert await db_pool.fetchval(hand_made) == 1
    assert await db_pool.fetchval("SELECT command FROM kb.mcp_servers") == "true"


async def test_members_read_no_literal_mcp_setting_of_a_products_manifest(
    registry: Registry,
) -> None:
    """Credentials belong in secrets (${NAME}); a literal an admin typed into a manifest's
    MCP env is hidden from members, who may list products."""
    document = example()
    (server,) = document["mcp"]["servers"]
    server["env"] = {"API_KEY": "sk-typed-by-hand", "TOKEN": "${WEB_TOKEN}"}
    await registry.stub.InstallProduct(install_request(document))
    request = registry_pb2.ListProductsRequest(project_id="alpha")

    def env_of(reply: registry_pb2.ListProductsResponse) -> dict[str, str]:
        (product,) = reply.products
        return json_format.MessageToDict(product.manifest)["mcp"]["servers"][0]["env"]

    assert env_of(await registry.member.ListProducts(request)) == {
        "API_KEY": HIDDEN_VALUE,
        "TOKEN": "${WEB_TOKEN}",
    }
    assert env_of(await registry.stub.ListProducts(request))["API_KEY"] == "sk-typed-by-hand"
