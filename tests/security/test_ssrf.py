"""No SSRF from MCP URLs: the toolpool refuses loopback, private, link-local, metadata and
its own platform's addresses when a server is saved and at every connect and redirect.

Traffic goes to loopback only: forbidden addresses are literal IPs or come from a fake
resolver, and each test asserts the guard refused before any socket was opened to them.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import AsyncIterator

import asyncpg
import grpc
import httpcore2
import httpx2
import pytest

from agentfleet.egress import (
    EgressPolicy,
    IPAddress,
    guarded_transport,
    platform_endpoints_of,
    refusal_of,
)
from agentfleet.mcp.servers import McpServerConfig
from agentfleet.testing.loopback import LoopbackServer
from agentfleet.testing.services import Stack, start_stack
from agentfleet.v1 import toolpool_pb2, toolpool_pb2_grpc
from services.toolpool.mcp import McpClientPool, McpUnavailableError

PROJECT = "alpha"
CALLERS = ("member", "admin", "service")
LOOPBACK_ONLY = (ipaddress.ip_network("127.0.0.1/32"),)


class LoopbackRedirector(LoopbackServer):
    """A plain HTTP server on 127.0.0.1 answering every request with a redirect."""

    def __init__(self, location: str) -> None:
        super().__init__()
        self.location = location
        self.requests = 0

    @property
    def url(self) -> str:
        return f"{super().url}/mcp"

    async def answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        self.requests += 1
        # Connection: close, so following the redirect needs a new connection (a new check).
        writer.write(
            f"HTTP/1.1 307 Temporary Redirect\r\nLocation: {self.location}\r\n"
            "Content-Length: 0\r\nConnection: close\r\n\r\n".encode()
        )
        await writer.drain()
        writer.close()


class RecordingConnector(httpcore2.AsyncNetworkBackend):
    """Really connects (to loopback only, or it fails the test), recording every address."""

    def __init__(self) -> None:
        self.connects: list[tuple[str, int]] = []
        self._real = httpcore2.AnyIOBackend()

    async def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):  # type: ignore[no-untyped-def]  # noqa: ASYNC109
        self.connects.append((host, port))
        assert ipaddress.ip_address(host).is_loopback, f"tried to connect to {host}"
        return await self._real.connect_tcp(host, port, timeout=timeout)


def _client(policy: EgressPolicy, connector: RecordingConnector) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(
        transport=guarded_transport(policy, connector), follow_redirects=True, timeout=5
    )


@pytest.mark.parametrize(
    "location",
    [
        "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
        "http://[fd00:ec2::254]/latest/meta-data/",
        "http://10.0.0.5:8080/admin",
        "http://[::ffff:192.168.1.1]/",
        "http://127.0.0.2:9000/",
    ],
)
async def test_a_redirect_to_a_forbidden_address_is_refused_before_connecting(
    location: str,
) -> None:
    connector = RecordingConnector()
    async with (
        LoopbackRedirector(location) as redirector,
        _client(EgressPolicy(allowed_networks=LOOPBACK_ONLY), connector) as client,
    ):
        with pytest.raises(httpx2.ConnectError) as caught:
            await client.get(redirector.url)
    assert redirector.requests == 1
    refused = refusal_of(caught.value)
    assert refused is not None
    assert "refused to connect" in str(refused)
    # The loopback server only: the redirect's target was never connected to.
    assert [host for host, _ in connector.connects] == ["127.0.0.1"]


async def test_a_name_rebound_to_a_private_address_is_refused_on_the_redirect() -> None:
    """DNS rebinding: the name resolves to loopback first, then to a private address."""
    answers = [["127.0.0.1"], ["10.0.0.5"]]

    async def rebinding(host: str, port: int) -> list[IPAddress]:
        assert host == "rebind.test"
        return [ipaddress.ip_address(a) for a in answers.pop(0)]

    connector = RecordingConnector()
    policy = EgressPolicy(allowed_networks=LOOPBACK_ONLY, resolver=rebinding)
    async with LoopbackRedirector("/mcp/") as redirector:
        port = redirector.url.split(":")[2].split("/")[0]
        async with _client(policy, connector) as client:
            with pytest.raises(httpx2.ConnectError) as caught:
                await client.get(f"http://rebind.test:{port}/mcp")
    refused = refusal_of(caught.value)
    assert refused is not None
    assert "rebind.test" in str(refused)
    assert "resolves to 10.0.0.5, a private address" in str(refused)
    assert connector.connects == [("127.0.0.1", int(port))]


@pytest.mark.parametrize("transport", ["sse", "streamable_http"])
@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (["127.0.0.1", "10.0.0.5"], "resolves to 10.0.0.5, a private address"),
        (["::ffff:169.254.169.254"], "a cloud metadata address"),
        (["100.64.3.4"], "carrier-grade NAT"),
        (["fe80::1"], "a link-local address"),
    ],
)
async def test_a_name_resolving_to_a_forbidden_address_fails_with_a_clear_error(
    transport: str, answer: list[str], reason: str
) -> None:
    async def resolver(host: str, port: int) -> list[IPAddress]:
        return [ipaddress.ip_address(a) for a in answer]

    pool = McpClientPool(egress=EgressPolicy(allowed_networks=LOOPBACK_ONLY, resolver=resolver))
    config = McpServerConfig(
        project_id=PROJECT,
        name="tenant",
        transport=transport,  # type: ignore[arg-type]
        url="http://mcp.tenant.example:8080/mcp",
        connect_timeout_s=5,
    )
    try:
        with pytest.raises(McpUnavailableError) as caught:
            await pool.test_server(config, {})
        result = await pool.call_tool(config, {}, "echo", {"text": "x"})
    finally:
        await pool.aclose()
    for message in (caught.value.message, result.error or ""):
        assert "mcp.tenant.example:8080" in message
        assert reason in message
        assert "AGENTFLEET_MCP_ALLOWED_NETWORKS" in message
    assert result.is_error


# -- against the toolpool service --------------------------------------------------------


@pytest.fixture
async def toolpool_stack(database_url: str, db_pool: asyncpg.Pool) -> AsyncIterator[Stack]:
    # All of loopback allowed: the platform's own pairs must still be refused.
    stack = await start_stack(
        database_url=database_url,
        pool=db_pool,
        names=("toolpool", "history"),
        environ={"AGENTFLEET_MCP_ALLOWED_NETWORKS": "127.0.0.0/8"},
    )
    try:
        yield stack
    finally:
        await stack.close()


async def _stub(stack: Stack, caller: str) -> toolpool_pb2_grpc.ToolPoolServiceStub:
    if caller == "service":
        # The credential of the service that calls the toolpool, as if stolen.
        token = stack.service_tokens["executor"]
    else:
        token = await stack.create_token(PROJECT, role=caller)
    return toolpool_pb2_grpc.ToolPoolServiceStub(stack.channel("toolpool", token=token))


def _http_server(url: str, name: str = "ssrf") -> toolpool_pb2.McpServer:
    return toolpool_pb2.McpServer(
        name=name,
        transport=toolpool_pb2.MCP_TRANSPORT_STREAMABLE_HTTP,
        url=url,
        headers={"Authorization": "Bearer ${TOKEN}"},
    )


async def _servers(pool: asyncpg.Pool) -> int:
    return await pool.fetchval("SELECT count(*) FROM kb.mcp_servers WHERE project_id = $1", PROJECT)


@pytest.mark.parametrize("caller", CALLERS)
@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://metadata.google.internal/computeMetadata/v1/",
        "http://[fd00:ec2::254]/",
        "http://100.100.100.200/",
        "http://10.0.0.5:8080/mcp",
        "http://[::ffff:10.0.0.5]/mcp",
        "http://100.64.0.1/",
        "http://0.0.0.0:5432/",
    ],
)
async def test_upsert_refuses_forbidden_literal_destinations(
    toolpool_stack: Stack, caller: str, url: str
) -> None:
    toolpool = await _stub(toolpool_stack, caller)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await toolpool.UpsertMcpServer(
            toolpool_pb2.UpsertMcpServerRequest(project_id=PROJECT, mcp_server=_http_server(url))
        )
    if caller == "admin":
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "mcp_server.url" in (caught.value.details() or "")
        assert "refused destination" in (caught.value.details() or "")
    else:  # not an admin of the project: refused before the URL is even looked at
        assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert await _servers(toolpool_stack.pool) == 0


@pytest.mark.parametrize("target", ["toolpool", "history"])
async def test_the_platforms_own_addresses_are_refused_even_when_loopback_is_allowed(
    toolpool_stack: Stack, target: str
) -> None:
    port = int(toolpool_stack.address(target).rsplit(":", 1)[1])
    toolpool = await _stub(toolpool_stack, "admin")
    await toolpool.SetSecret(
        toolpool_pb2.SetSecretRequest(project_id=PROJECT, name="TOKEN", value="tok-s3cret")
    )
    # Saved (127.0.0.0/8 is allowed), refused at connect: the pair is the platform's.
    await toolpool.UpsertMcpServer(
        toolpool_pb2.UpsertMcpServerRequest(
            project_id=PROJECT, mcp_server=_http_server(f"http://127.0.0.1:{port}/mcp")
        )
    )
    probe = await toolpool.TestMcpServer(
        toolpool_pb2.TestMcpServerRequest(project_id=PROJECT, name="ssrf")
    )
    assert not probe.ok
    assert f"refused to connect to 127.0.0.1:{port}" in probe.error
    assert "platform's own" in probe.error
    assert "tok-s3cret" not in probe.error
    listed = await toolpool.ListTools(toolpool_pb2.ListToolsRequest(project_id=PROJECT))
    unavailable = {u.name: u.error for u in listed.unavailable_servers}
    assert "platform's own" in unavailable["ssrf"]


async def test_the_database_pair_is_refused_even_when_loopback_is_allowed() -> None:
    # The test database listens on a unix socket: a TCP database URL is given here.
    policy = EgressPolicy(
        allowed_networks=(ipaddress.ip_network("127.0.0.0/8"),),
        platform_endpoints=lambda: platform_endpoints_of(
            [], [], "postgresql://agentfleet:pw@127.0.0.1:6543/agentfleet"
        ),
    )
    connector = RecordingConnector()
    async with _client(policy, connector) as client:
        with pytest.raises(httpx2.ConnectError) as caught:
            await client.get("http://localhost:6543/mcp")
    refused = refusal_of(caught.value)
    assert refused is not None
    assert "platform's own" in str(refused)
    assert connector.connects == []
