"""Connecting to a project's remote A2A agent with the official ``a2a-sdk`` client.

Everything the client sends goes through one ``httpx`` client built here, so two rules hold
for every connection it makes -- the card fetch, each redirect hop, the JSON-RPC endpoint the
card names, a reconnect:

* the toolpool's MCP egress guard (:class:`~agentfleet.egress.EgressPolicy` and
  its :class:`~agentfleet.egress.GuardedNetworkBackend`) decides where it may
  connect, under the HTTP client (resolved once, every address checked, the socket opened to
  a checked address), with ``AGENTFLEET_MCP_ALLOWED_NETWORKS`` as the one allowlist;
* headers are the registered ones with ``${NAME}`` filled from the project's sealed secrets
  by the one interpolation of secrets (:func:`~agentfleet.secrets.values.interpolate`),
  plus the W3C ``traceparent`` of the current span, so the remote side joins our trace.

The SDK's ``httpx`` is not the MCP SDK's ``httpx2``: the guard's network backend is the same
object, set under an ``httpx`` transport's connection pool here.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping

import httpcore
import httpx
from a2a.client import ClientConfig, ClientFactory
from a2a.client.card_resolver import parse_agent_card
from a2a.client.client import Client
from a2a.types import a2a_pb2 as a2a
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from agentfleet.egress import (
    EgressPolicy,
    GuardedNetworkBackend,
    platform_endpoints,
    refusal_of,
)
from agentfleet.errors import FailedPrecondition
from agentfleet.process.service_runtime import ServiceContext
from agentfleet.secrets.values import MissingSecretError, interpolate
from services.executor.registry.remote_agents import RemoteAgent

MAX_CARD_BYTES = 256 * 1024
"""A remote Agent Card larger than this is refused (a hostile peer sets its size)."""
MAX_REDIRECTS = 3
CONNECT_TIMEOUT_S = 10.0
CANCEL_TIMEOUT_S = 10.0
"""How long ``tasks/cancel`` may take before the run is recorded cancelled anyway."""
MAX_RESPONSE_BYTES = 8 * 1024 * 1024
"""Most bytes one response of a remote agent may carry, its stream included: the SDK reads a
server-sent event whole before parsing it, so a peer sending one endless event would
otherwise grow the executor's memory without bound. What a child keeps of a stream is far
less (its progress events and answer are capped), so a legitimate peer never nears this."""


class ResponseTooLarge(httpx.ReadError):
    """A remote agent's response passed :data:`MAX_RESPONSE_BYTES`."""


class _BoundedStream(httpx.AsyncByteStream):
    def __init__(self, stream: httpx.AsyncByteStream, url: str) -> None:
        self._stream, self._url = stream, url

    async def __aiter__(self):  # type: ignore[no-untyped-def]
        seen = 0
        async for chunk in self._stream:
            seen += len(chunk)
            if seen > MAX_RESPONSE_BYTES:
                raise ResponseTooLarge(
                    f"the response of {self._url} passed {MAX_RESPONSE_BYTES} bytes"
                )
            yield chunk

    async def aclose(self) -> None:
        await self._stream.aclose()


class _BoundedTransport(httpx.AsyncBaseTransport):
    """Every response's body counted as it is read (:data:`MAX_RESPONSE_BYTES`)."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self._inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._inner.handle_async_request(request)
        assert isinstance(response.stream, httpx.AsyncByteStream)
        response.stream = _BoundedStream(response.stream, str(request.url))
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


class RemoteAgentError(FailedPrecondition):
    """A remote agent that cannot be reached or used; the message says why (never a secret)."""


def resolved_headers(agent: RemoteAgent, secrets: Mapping[str, str]) -> dict[str, str]:
    """The agent's headers with every ``${NAME}`` filled from ``secrets``; never stored or
    logged. :class:`RemoteAgentError` naming each missing secret."""
    try:
        return {
            key: interpolate(value, secrets, field=f"remote_agent.headers[{key}]")
            for key, value in agent.headers.items()
        }
    except MissingSecretError as exc:
        raise RemoteAgentError(f"remote agent {agent.name!r}: {exc}") from exc


async def _inject_trace_context(request: httpx.Request) -> None:
    # The current span's context, or nothing when nothing is traced.
    TraceContextTextMapPropagator().inject(request.headers)


def guarded_http_client(
    policy: EgressPolicy, headers: Mapping[str, str], *, timeout_s: float
) -> httpx.AsyncClient:
    """An ``httpx`` client whose every connect passes ``policy`` (redirects followed, each
    hop checked), sending ``headers`` and the current trace context. No proxy from the
    environment: a proxy would be the checked address instead of the peer."""
    transport = httpx.AsyncHTTPTransport(trust_env=False)
    # httpx does not take a network backend; its connection pool does (as guarded_transport).
    transport._pool = httpcore.AsyncConnectionPool(
        ssl_context=httpx.create_ssl_context(trust_env=False),
        max_connections=10,
        max_keepalive_connections=5,
        keepalive_expiry=5.0,
        network_backend=GuardedNetworkBackend(policy, httpcore.AnyIOBackend()),  # type: ignore[arg-type]
    )
    return httpx.AsyncClient(
        transport=_BoundedTransport(transport),
        headers=dict(headers),
        timeout=httpx.Timeout(timeout_s, connect=CONNECT_TIMEOUT_S),
        follow_redirects=True,
        max_redirects=MAX_REDIRECTS,
        trust_env=False,
        event_hooks={"request": [_inject_trace_context]},
    )


async def fetch_card(http: httpx.AsyncClient, card_url: str) -> a2a.AgentCard:
    """The Agent Card at ``card_url``, at most :data:`MAX_CARD_BYTES`; :class:`RemoteAgentError`
    saying why not (the egress refusal's own words when the guard refused a hop)."""
    try:
        async with http.stream("GET", card_url) as response:
            if response.status_code != 200:
                raise RemoteAgentError(
                    f"the agent card at {card_url} answered HTTP {response.status_code}"
                )
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > MAX_CARD_BYTES:
                    raise RemoteAgentError(
                        f"the agent card at {card_url} is larger than {MAX_CARD_BYTES} bytes"
                    )
        card = parse_agent_card(json.loads(body))
    except RemoteAgentError:
        raise
    except Exception as exc:
        raise remote_error(exc, f"fetching the agent card at {card_url}") from exc
    if not card.name or not endpoint_of(card):
        raise RemoteAgentError(
            f"fetching the agent card at {card_url}: not an Agent Card, or none this client can "
            f"use (it names no agent, or no {' or '.join(BINDINGS)} interface to send tasks to)"
        )
    return card


def remote_error(exc: BaseException, doing: str) -> RemoteAgentError:
    """What a failed call to a remote agent tells the run (and its parent's model)."""
    refused = refusal_of(exc)
    if refused is not None:
        return RemoteAgentError(f"{doing}: {refused}")
    if isinstance(exc, httpx.TooManyRedirects):
        return RemoteAgentError(f"{doing}: more than {MAX_REDIRECTS} redirects")
    detail = str(exc) or type(exc).__name__
    return RemoteAgentError(f"{doing}: {type(exc).__name__}: {detail[:500]}")


BINDINGS = ("JSONRPC", "HTTP+JSON")
"""The A2A bindings a remote child speaks: both run on the guarded httpx client. Not gRPC: a
gRPC channel would connect outside the egress guard."""


def a2a_client(http: httpx.AsyncClient, card: a2a.AgentCard) -> Client:
    """The SDK client for the card's first JSON-RPC or HTTP+JSON interface, on ``http``."""
    config = ClientConfig(
        httpx_client=http, streaming=True, supported_protocol_bindings=list(BINDINGS)
    )
    return ClientFactory(config).create(card)


async def open_client(
    agent: RemoteAgent, secrets: Mapping[str, str], policy: EgressPolicy
) -> tuple[Client, a2a.AgentCard]:
    """The SDK client of ``agent`` (its headers filled from ``secrets``, every connect
    through ``policy``) and its card; the HTTP client closed when the card cannot be had."""
    http = guarded_http_client(policy, resolved_headers(agent, secrets), timeout_s=agent.timeout_s)
    try:
        card = await fetch_card(http, agent.card_url)
    except BaseException:
        await http.aclose()
        raise
    return a2a_client(http, card), card


async def cancel_task(client: Client, task_id: str) -> str:
    """``tasks/cancel`` of ``task_id``, bounded by :data:`CANCEL_TIMEOUT_S`; "" when it was
    sent, else why not (the caller ends its run all the same: the remote agent may have
    finished or gone)."""
    try:
        async with asyncio.timeout(CANCEL_TIMEOUT_S):
            await client.cancel_task(a2a.CancelTaskRequest(id=task_id))
    except Exception as exc:
        return remote_error(exc, f"cancelling remote task {task_id[:200]}").message
    return ""


def endpoint_of(card: a2a.AgentCard) -> str:
    """The URL the card tells clients to send tasks to, on a binding spoken here ("" when
    the card offers none)."""
    for interface in card.supported_interfaces:
        if interface.url and interface.protocol_binding in BINDINGS:
            return interface.url
    return ""


def egress_policy(context: ServiceContext) -> EgressPolicy:
    """The MCP egress policy exactly as the toolpool builds it: AGENTFLEET_MCP_ALLOWED_NETWORKS
    lifts range refusals; the platform's own service and database addresses are never
    reachable."""
    settings = context.settings
    return EgressPolicy(
        allowed_networks=settings.mcp_allowed_networks,
        # Read at each connect: a test stack learns its services' ports after this build.
        platform_endpoints=lambda: platform_endpoints(context.settings, context.database_url),
    )
