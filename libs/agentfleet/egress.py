"""Where a tenant-configured URL may be connected to: the one guard against SSRF.

It lives in the library because more than the toolpool's MCP transports use it: the
executor's product install judges a manifest's MCP URLs with it at save time.

A project configures MCP server URLs, and the toolpool connects to them with the project's
secrets in headers. Without a guard a tenant could point a URL at the toolpool's own
network: loopback, private ranges, the cloud metadata service, or the platform's own
services and database. :class:`EgressPolicy` decides, :class:`GuardedNetworkBackend`
enforces it where the connection is made:

* the host is resolved once, every resolved address is checked, and the socket is opened to
  one of those checked addresses (no second lookup, so no DNS-rebinding window); TLS still
  verifies and sends SNI for the URL's host name, and the Host header is the URL's;
* the backend sits under the HTTP client, so every connect is checked: the first one, a
  reconnect, a redirect, the SSE ``endpoint`` URL a server hands back;
* ``AGENTFLEET_MCP_ALLOWED_NETWORKS`` lifts the range refusal for the networks it lists
  (tests list 127.0.0.1/32), never for the platform's own host:port pairs; a metadata
  address is lifted only by an entry naming exactly that address.

:func:`classify` and :meth:`EgressPolicy.literal_refusal` are pure; the save-time check of
:mod:`~services.toolpool.mcp.validation` uses the latter (no DNS when a server is saved).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

import anyio
import httpcore2
import httpx2

if TYPE_CHECKING:
    from agentfleet.config import Settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], Awaitable[list[IPAddress]]]
"""Resolves (host, port) to addresses; the default asks the system resolver."""

ALLOWLIST_SETTING = "AGENTFLEET_MCP_ALLOWED_NETWORKS"

METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200")
)
METADATA_NAMES = frozenset({"metadata.google.internal", "metadata", "instance-data"})
_CGNAT = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
# RFC 1918 and unique local IPv6 (Python's is_private also counts reserved ranges).
_PRIVATE = tuple(
    ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7")
)
_LOOPBACK_NAMES = ("localhost", "localhost.localdomain")


class EgressRefused(httpcore2.ConnectError):
    """A connection the policy forbids; raised before any socket is opened.

    A ``ConnectError`` for the HTTP client and the MCP SDK (so it surfaces like any failed
    connect), whose message names the host, the address and why.
    """

    def __init__(self, message: str, *, host: str, address: str | None) -> None:
        super().__init__(message)
        self.host = host
        self.address = address


def classify(address: IPAddress) -> str | None:
    """Why ``address`` is not a public destination (``"a private address"``), or None.

    IPv6 forms that carry an IPv4 address (mapped ``::ffff:a.b.c.d``, NAT64, 6to4, Teredo)
    are judged by the IPv4 address they reach.
    """
    if address in METADATA_ADDRESSES:
        return "a cloud metadata address"
    embedded = embedded_ipv4(address)
    if embedded is not None:
        reason = classify(embedded)
        return f"{reason} (IPv4 {embedded} inside IPv6)" if reason else None
    if address.is_unspecified:
        return "the unspecified address"
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address"
    if isinstance(address, ipaddress.IPv4Address) and address in _CGNAT:
        return "a carrier-grade NAT (shared) address"
    if address.is_multicast:
        return "a multicast address"
    if any(address in network for network in _PRIVATE):
        return "a private address"
    if address.is_reserved or not address.is_global:
        return "a reserved (non-public) address"
    return None


def embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for (mapped, NAT64, 6to4, Teredo), if any."""
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    return None


async def system_resolver(host: str, port: int) -> list[IPAddress]:
    """Every address the system resolver gives for ``host`` (TCP), in its order."""
    infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    out: list[IPAddress] = []
    for _family, _type, _proto, _name, sockaddr in infos:
        # Scoped IPv6 ("fe80::1%eth0") keeps the scope in the string; the address is before it.
        address = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
        if address not in out:
            out.append(address)
    return out


def _literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return None


def _normal_name(host: str) -> str:
    return host.strip("[]").rstrip(".").lower()


@dataclass(frozen=True, kw_only=True, slots=True)
class EgressPolicy:
    """Which addresses MCP HTTP transports may connect to (default: public ones only)."""

    allowed_networks: tuple[IPNetwork, ...] = ()
    """Networks whose range refusal is lifted (AGENTFLEET_MCP_ALLOWED_NETWORKS)."""
    platform_endpoints: Callable[[], Iterable[tuple[str, int]]] = field(default=lambda: ())
    """The platform's own host:port pairs (services, database), read at each check."""
    resolver: Resolver = system_resolver

    def allows_range(self, address: IPAddress) -> bool:
        """Whether the allowlist lifts the range refusal of ``address``."""
        candidates = [address]
        embedded = embedded_ipv4(address)
        if embedded is not None:
            candidates.append(embedded)
        for network in self.allowed_networks:
            for candidate in candidates:
                if candidate.version != network.version or candidate not in network:
                    continue
                if candidate in METADATA_ADDRESSES and network.num_addresses != 1:
                    continue  # a broad range does not open the metadata service
                return True
        return False

    def address_refusal(self, address: IPAddress) -> str | None:
        """Why connecting to ``address`` is refused by range, or None (platform pairs apart)."""
        reason = classify(address)
        if reason is None or self.allows_range(address):
            return None
        return f"{reason}; list it in {ALLOWLIST_SETTING} to allow it"

    def literal_refusal(self, host: str) -> str | None:
        """Why a URL host is refused without any lookup (literal IP, localhost, metadata name).

        For the check when a server is saved; names are judged only at connect time.
        """
        name = _normal_name(host)
        if name in METADATA_NAMES:
            return f"{name} is a cloud metadata name"
        literal = _literal(host)
        if literal is None and (name in _LOOPBACK_NAMES or name.endswith(".localhost")):
            literal = ipaddress.IPv4Address("127.0.0.1")
        if literal is None:
            return None
        reason = self.address_refusal(literal)
        return f"{host} is {reason}" if reason else None

    async def check(self, host: str, port: int) -> list[IPAddress]:
        """The addresses ``host`` may be connected on, resolved once and every one checked.

        Raises :class:`EgressRefused` when any resolved address is refused (a name that
        resolves to one public and one private address is refused: which one a later lookup
        returns is the resolver's choice, not ours) or a platform pair is reached.
        """
        name = _normal_name(host)
        if name in METADATA_NAMES:
            raise EgressRefused(
                f"refused to connect to {host}: a cloud metadata name", host=host, address=None
            )
        platform = await self._platform_pairs()
        if any(name == p_name and port == p_port for p_name, _, p_port in platform):
            raise _platform_refusal(host, port, None)
        literal = _literal(host)
        addresses = [literal] if literal is not None else await self._resolve(host, port)
        if not addresses:
            raise httpcore2.ConnectError(f"{host} resolves to no address")
        for address in addresses:
            if self._is_platform(address, port, platform):
                raise _platform_refusal(host, port, address)
            reason = self.address_refusal(address)
            if reason is not None:
                where = f"{address} is" if literal is not None else f"it resolves to {address},"
                raise EgressRefused(
                    f"refused to connect to {host}:{port}: {where} {reason}",
                    host=host,
                    address=str(address),
                )
        return addresses

    async def _resolve(self, host: str, port: int) -> list[IPAddress]:
        try:
            return await self.resolver(host, port)
        except (OSError, UnicodeError) as exc:
            raise httpcore2.ConnectError(f"cannot resolve {host}: {exc}") from exc

    async def _platform_pairs(self) -> list[tuple[str, IPAddress | None, int]]:
        """(normalised host name, resolved address or None, port) of each platform pair."""
        pairs: list[tuple[str, IPAddress | None, int]] = []
        for host, port in self.platform_endpoints():
            literal = _literal(host)
            if literal is not None:
                pairs.append((_normal_name(host), literal, port))
                continue
            pairs.append((_normal_name(host), None, port))
            try:
                resolved = await self.resolver(host, port)
            except (OSError, UnicodeError):
                continue  # unresolvable here: matched by name only
            pairs += [(_normal_name(host), a, port) for a in resolved]
        return pairs

    @staticmethod
    def _is_platform(
        address: IPAddress, port: int, platform: list[tuple[str, IPAddress | None, int]]
    ) -> bool:
        for _name, platform_address, platform_port in platform:
            if port != platform_port:
                continue
            if platform_address is not None and _unwrapped(address) == _unwrapped(platform_address):
                return True
            # A service bound to loopback or to every interface answers on any local address.
            if platform_address is not None and _is_local(platform_address) and _is_local(address):
                return True
        return False


def _platform_refusal(host: str, port: int, address: IPAddress | None) -> EgressRefused:
    return EgressRefused(
        f"refused to connect to {host}:{port}: it is one of the platform's own service or "
        "database addresses, never reachable from an MCP server",
        host=host,
        address=str(address) if address is not None else None,
    )


def _unwrapped(address: IPAddress) -> IPAddress:
    return embedded_ipv4(address) or address


def _is_local(address: IPAddress) -> bool:
    unwrapped = _unwrapped(address)
    return unwrapped.is_loopback or unwrapped.is_unspecified


def platform_endpoints_of(
    addresses: Iterable[str], listen: Iterable[tuple[str, int]], database_url: str | None
) -> list[tuple[str, int]]:
    """The platform's own host:port pairs: service addresses, listen pairs and the database."""
    pairs: list[tuple[str, int]] = list(listen)
    for address in addresses:
        host, _, port = address.rpartition(":")
        if host and port.isdigit():
            pairs.append((host.strip("[]"), int(port)))
    if database_url:
        parts = urlsplit(database_url)
        query = parse_qs(parts.query)
        try:
            host = parts.hostname or query.get("host", [""])[0]
            port = parts.port or int(query.get("port", ["5432"])[0])
        except ValueError:
            host, port = "", 0  # several hosts or an odd port: the services' pairs still count
        if host and not host.startswith("/"):  # a unix socket directory is no TCP pair
            pairs.append((host, port))
    return pairs


def platform_endpoints(settings: Settings, database_url: str | None) -> list[tuple[str, int]]:
    """Every host:port pair of this deployment a tenant's URL may never reach: each service's
    address and listen port, the a2a service's HTTP and gRPC-binding ports, the console's, and
    the database. Read at each connect (a test stack learns its ports after the build)."""
    from agentfleet.a2a_settings import load_a2a_settings
    from agentfleet.console_settings import load_console_settings

    a2a, console = load_a2a_settings(), load_console_settings()
    ports = [*settings.ports.values(), a2a.http_port, a2a.grpc_binding_port, console.port]
    return platform_endpoints_of(
        settings.addresses.values(),
        [(settings.listen_host, p) for p in ports if p > 0],
        database_url,
    )


class GuardedNetworkBackend(httpcore2.AsyncNetworkBackend):
    """The HTTP client's network backend: checks the policy, then connects to a checked IP."""

    def __init__(
        self,
        policy: EgressPolicy,
        connector: httpcore2.AsyncNetworkBackend | None = None,
    ) -> None:
        self.policy = policy
        self._connector = connector if connector is not None else httpcore2.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's backend interface)
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        try:
            with anyio.fail_after(timeout):
                addresses = await self.policy.check(host, port)
        except TimeoutError:
            raise httpcore2.ConnectTimeout(f"resolving {host} timed out") from None
        failure: httpcore2.ConnectError | None = None
        for address in addresses:
            try:
                # The checked address itself: no second lookup between check and connect.
                return await self._connector.connect_tcp(
                    str(address),
                    port,
                    timeout=timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except httpcore2.ConnectError as exc:
                failure = exc
        assert failure is not None
        raise failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's backend interface)
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        raise EgressRefused(
            "refused to connect to a unix socket from an MCP transport", host=path, address=None
        )

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)


# httpx's own defaults for a client's connection pool.
_LIMITS = httpx2.Limits(max_connections=100, max_keepalive_connections=20, keepalive_expiry=5.0)


def guarded_transport(
    policy: EgressPolicy, connector: httpcore2.AsyncNetworkBackend | None = None
) -> httpx2.AsyncHTTPTransport:
    """An HTTP transport whose every connection goes through :class:`GuardedNetworkBackend`.

    No proxy from the environment (a proxy would make the proxy the checked address).
    """
    transport = httpx2.AsyncHTTPTransport(trust_env=False)
    # httpx does not take a network backend; its connection pool does. Same settings as the
    # pool it replaces, with the guard underneath.
    transport._pool = httpcore2.AsyncConnectionPool(
        ssl_context=httpx2.create_ssl_context(trust_env=False),
        max_connections=_LIMITS.max_connections,
        max_keepalive_connections=_LIMITS.max_keepalive_connections,
        keepalive_expiry=_LIMITS.keepalive_expiry,
        network_backend=GuardedNetworkBackend(policy, connector),
    )
    return transport


def refusal_of(exc: BaseException) -> EgressRefused | None:
    """The :class:`EgressRefused` behind ``exc`` (httpx wraps it in its own ConnectError)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, EgressRefused):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None
