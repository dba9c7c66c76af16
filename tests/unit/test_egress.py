"""The MCP egress guard's pure parts: address classes, allowlist, platform pairs, and the
network backend with a fake resolver and a recording connector (no socket is opened)."""

from __future__ import annotations

import ipaddress

import httpcore2
import pytest

from agentfleet.config import ConfigError, load_settings
from agentfleet.egress import (
    EgressPolicy,
    EgressRefused,
    GuardedNetworkBackend,
    IPAddress,
    classify,
    platform_endpoints_of,
)

FORBIDDEN = {
    "127.0.0.1": "loopback",
    "127.8.9.10": "loopback",
    "::1": "loopback",
    "10.0.0.5": "private",
    "172.16.0.1": "private",
    "172.31.255.254": "private",
    "192.168.1.1": "private",
    "fc00::1": "private",
    "fd12:3456::1": "private",
    "169.254.1.1": "link-local",
    "fe80::1": "link-local",
    "169.254.169.254": "metadata",
    "fd00:ec2::254": "metadata",
    "100.100.100.200": "metadata",
    "100.64.0.1": "carrier-grade NAT",
    "100.127.255.255": "carrier-grade NAT",
    "224.0.0.1": "multicast",
    "239.255.255.250": "multicast",
    "ff02::1": "multicast",
    "0.0.0.0": "unspecified",
    "::": "unspecified",
    "240.0.0.1": "reserved",
    "255.255.255.255": "reserved",
    "192.0.2.10": "reserved",
    "198.18.0.1": "reserved",
    "2001:db8::1": "reserved",
    # IPv6 forms of IPv4 addresses are judged by the IPv4 address.
    "::ffff:10.0.0.5": "private",
    "::ffff:127.0.0.1": "loopback",
    "::ffff:169.254.169.254": "metadata",
    "::ffff:100.64.0.9": "carrier-grade NAT",
    "64:ff9b::a00:5": "private",  # NAT64 of 10.0.0.5
    "2002:a00:5::1": "private",  # 6to4 of 10.0.0.5
}
PUBLIC = [
    "8.8.8.8",
    "1.1.1.1",
    "93.184.216.34",
    "100.63.255.255",
    "100.128.0.1",
    "172.32.0.1",
    "2606:4700:4700::1111",
    "::ffff:8.8.8.8",
    "64:ff9b::808:808",
]


def ip(text: str) -> IPAddress:
    return ipaddress.ip_address(text)


def nets(*cidrs: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    return tuple(ipaddress.ip_network(c) for c in cidrs)


@pytest.mark.parametrize(("address", "kind"), FORBIDDEN.items())
def test_non_public_addresses_are_classified(address: str, kind: str) -> None:
    reason = classify(ip(address))
    assert reason is not None
    assert kind in reason, (address, reason)


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_pass(address: str) -> None:
    assert classify(ip(address)) is None


def test_the_allowlist_lifts_only_its_networks() -> None:
    policy = EgressPolicy(allowed_networks=nets("127.0.0.1/32", "10.1.0.0/16", "169.254.0.0/16"))
    assert policy.address_refusal(ip("127.0.0.1")) is None
    assert policy.address_refusal(ip("::ffff:127.0.0.1")) is None
    assert policy.address_refusal(ip("10.1.200.3")) is None
    assert policy.address_refusal(ip("169.254.1.1")) is None
    refused = policy.address_refusal(ip("127.0.0.2"))
    assert refused is not None
    assert "AGENTFLEET_MCP_ALLOWED_NETWORKS" in refused
    assert policy.address_refusal(ip("10.2.0.1")) is not None
    assert policy.address_refusal(ip("::1")) is not None
    # A broad range does not open the metadata service; an entry naming it exactly does.
    assert policy.address_refusal(ip("169.254.169.254")) is not None
    exact = EgressPolicy(allowed_networks=nets("169.254.169.254/32"))
    assert exact.address_refusal(ip("169.254.169.254")) is None


@pytest.mark.parametrize(
    "host",
    ["localhost", "LOCALHOST.", "api.localhost", "127.0.0.1", "[::1]", "10.0.0.5",
     "169.254.169.254", "metadata.google.internal", "[::ffff:192.168.0.1]", "0.0.0.0"],
)  # fmt: skip
def test_literal_hosts_are_refused_without_a_lookup(host: str) -> None:
    assert EgressPolicy().literal_refusal(host) is not None


def test_literal_check_leaves_names_to_connect_time_and_honours_the_allowlist() -> None:
    assert EgressPolicy().literal_refusal("mcp.example.com") is None
    assert EgressPolicy().literal_refusal("8.8.8.8") is None
    loopback = EgressPolicy(allowed_networks=nets("127.0.0.1/32"))
    assert loopback.literal_refusal("127.0.0.1") is None
    assert loopback.literal_refusal("localhost") is None
    assert loopback.literal_refusal("metadata.google.internal") is not None


class FakeResolver:
    """Answers from a table, counting lookups; unknown names fail like DNS does."""

    def __init__(self, table: dict[str, list[str]]) -> None:
        self.table = table
        self.lookups: list[str] = []

    async def __call__(self, host: str, port: int) -> list[IPAddress]:
        self.lookups.append(host)
        if host not in self.table:
            raise OSError(f"no such host {host}")
        return [ip(a) for a in self.table[host]]


async def test_a_name_is_refused_when_any_address_it_resolves_to_is_forbidden() -> None:
    resolver = FakeResolver({"mcp.tenant.example": ["93.184.216.34", "10.0.0.5"]})
    with pytest.raises(EgressRefused) as refused:
        await EgressPolicy(resolver=resolver).check("mcp.tenant.example", 443)
    message = str(refused.value)
    assert "mcp.tenant.example" in message
    assert "resolves to 10.0.0.5, a private address" in message
    assert "AGENTFLEET_MCP_ALLOWED_NETWORKS" in message


async def test_metadata_names_are_refused_before_any_lookup() -> None:
    resolver = FakeResolver({"metadata.google.internal": ["8.8.8.8"]})
    with pytest.raises(EgressRefused, match="metadata"):
        await EgressPolicy(resolver=resolver).check("metadata.google.internal", 80)
    assert resolver.lookups == []


async def test_unresolvable_names_fail_as_connect_errors() -> None:
    with pytest.raises(httpcore2.ConnectError, match=r"cannot resolve nowhere\.test"):
        await EgressPolicy(resolver=FakeResolver({})).check("nowhere.test", 80)


async def test_platform_pairs_are_refused_even_when_their_range_is_allowed() -> None:
    resolver = FakeResolver({"toolpool": ["10.1.2.3"], "localhost": ["127.0.0.1"]})
    policy = EgressPolicy(
        allowed_networks=nets("127.0.0.0/8", "10.0.0.0/8"),
        platform_endpoints=lambda: [("127.0.0.1", 50052), ("toolpool", 50060)],
        resolver=resolver,
    )
    for host, port in [
        ("127.0.0.1", 50052),
        ("127.0.0.2", 50052),  # any loopback address reaches a service bound to loopback
        ("localhost", 50052),
        ("[::ffff:127.0.0.1]", 50052),
        ("10.1.2.3", 50060),  # the address the platform's name resolves to
        ("[::ffff:10.1.2.3]", 50060),
        ("TOOLPOOL", 50060),  # the name itself
    ]:
        with pytest.raises(EgressRefused, match="platform's own"):
            await policy.check(host, port)
    assert await policy.check("127.0.0.1", 50099) == [ip("127.0.0.1")]
    assert await policy.check("10.1.2.3", 50099) == [ip("10.1.2.3")]


def test_platform_endpoints_come_from_addresses_listen_pairs_and_the_database() -> None:
    pairs = platform_endpoints_of(
        ["toolpool:50052", "[::1]:50054"],
        [("0.0.0.0", 50051)],
        "postgresql://user:p%40ss@db.internal:6543/agentfleet",
    )
    assert pairs == [
        ("0.0.0.0", 50051),
        ("toolpool", 50052),
        ("::1", 50054),
        ("db.internal", 6543),
    ]
    assert platform_endpoints_of([], [], "postgresql://u@db/x") == [("db", 5432)]
    assert platform_endpoints_of([], [], "postgresql:///x?host=/var/run/postgresql") == []


class RecordingConnector(httpcore2.AsyncNetworkBackend):
    def __init__(self) -> None:
        self.connects: list[tuple[str, int]] = []

    async def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):  # type: ignore[no-untyped-def]  # noqa: ASYNC109
        self.connects.append((host, port))
        return httpcore2.AsyncMockStream([])


async def test_the_backend_connects_to_the_checked_address_not_the_name() -> None:
    connector = RecordingConnector()
    resolver = FakeResolver({"mcp.example": ["93.184.216.34"]})
    backend = GuardedNetworkBackend(EgressPolicy(resolver=resolver), connector)
    await backend.connect_tcp("mcp.example", 443, timeout=5)
    # One lookup, and the socket goes to the address that was checked.
    assert resolver.lookups == ["mcp.example"]
    assert connector.connects == [("93.184.216.34", 443)]


async def test_the_backend_refuses_before_connecting() -> None:
    connector = RecordingConnector()
    resolver = FakeResolver({"rebind.example": ["::ffff:169.254.169.254"]})
    backend = GuardedNetworkBackend(EgressPolicy(resolver=resolver), connector)
    with pytest.raises(EgressRefused, match="metadata"):
        await backend.connect_tcp("rebind.example", 80, timeout=5)
    with pytest.raises(EgressRefused, match="unix socket"):
        await backend.connect_unix_socket("/var/run/docker.sock")
    assert connector.connects == []


def test_the_allowlist_setting_takes_cidrs_and_names_a_bad_one() -> None:
    settings = load_settings({"AGENTFLEET_MCP_ALLOWED_NETWORKS": "10.1.0.0/16, 127.0.0.1,fd00::/8"})
    assert settings.mcp_allowed_networks == nets("10.1.0.0/16", "127.0.0.1/32", "fd00::/8")
    assert load_settings({}).mcp_allowed_networks == ()
    with pytest.raises(ConfigError, match=r"AGENTFLEET_MCP_ALLOWED_NETWORKS: '10\.0\.0\.0/33'"):
        load_settings({"AGENTFLEET_MCP_ALLOWED_NETWORKS": "10.0.0.0/8,10.0.0.0/33"})


def test_the_platform_pairs_include_the_a2a_and_console_ports(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A tenant URL may not reach the a2a service's HTTP or gRPC-binding port or the console
    either, though they are no gRPC service address (with loopback allowlisted, as in a dev
    stack, a remote agent could otherwise be the platform's own A2A endpoint)."""
    from agentfleet.config import load_settings
    from agentfleet.egress import platform_endpoints

    monkeypatch.setenv("AGENTFLEET_A2A_HTTP_PORT", "51055")
    monkeypatch.setenv("AGENTFLEET_A2A_GRPC_BINDING_PORT", "51057")
    monkeypatch.setenv("AGENTFLEET_CONSOLE_PORT", "18080")
    settings = load_settings()
    pairs = platform_endpoints(settings, "postgresql://db.internal:6432/kb")
    for port in (51055, 51057, 18080, *settings.ports.values()):
        assert (settings.listen_host, port) in pairs
    assert ("db.internal", 6432) in pairs
