"""Limits every gRPC server applies: concurrency, connections, and open streams per token.

:class:`ServerLimits` holds them (from the ``AGENTFLEET_GRPC_*`` and
``AGENTFLEET_MAX_STREAMS_PER_TOKEN`` settings); :func:`server_options` turns them into the
channel arguments of ``grpc.aio.server``; :class:`StreamSlots` counts the response streams
each token holds open in this process and refuses one past the limit with
RESOURCE_EXHAUSTED naming the limit.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from agentfleet.errors import ResourceExhausted


@dataclass(frozen=True, kw_only=True, slots=True)
class ServerLimits:
    """Per-process limits of one gRPC server; the defaults are the settings' defaults."""

    max_concurrent_rpcs: int = 1000
    """AGENTFLEET_GRPC_MAX_CONCURRENT_RPCS: RPCs in progress at once, open streams included."""
    max_streams_per_connection: int = 100
    """AGENTFLEET_GRPC_MAX_STREAMS_PER_CONNECTION: HTTP/2 streams one connection may open."""
    max_streams_per_token: int = 64
    """AGENTFLEET_MAX_STREAMS_PER_TOKEN: response streams one token may hold open."""
    keepalive_time_s: float = 60.0
    """AGENTFLEET_GRPC_KEEPALIVE_S: the server pings an idle client this often."""
    keepalive_timeout_s: float = 20.0
    """AGENTFLEET_GRPC_KEEPALIVE_TIMEOUT_S: a ping unanswered this long closes the connection."""
    min_client_ping_interval_s: float = 10.0
    """AGENTFLEET_GRPC_MIN_PING_INTERVAL_S: clients pinging more often are sent GOAWAY."""
    max_connection_idle_s: float = 300.0
    """AGENTFLEET_GRPC_MAX_CONNECTION_IDLE_S: a connection with no RPC this long is closed."""
    max_connection_age_s: float = 1800.0
    """AGENTFLEET_GRPC_MAX_CONNECTION_AGE_S: connections are recycled after this long, so
    clients rebalance across replicas."""
    max_connection_age_grace_s: float = 1800.0
    """AGENTFLEET_GRPC_MAX_CONNECTION_AGE_GRACE_S: time RPCs get to finish on a recycled
    connection (open streams are cut after it and clients reconnect)."""


def server_options(limits: ServerLimits) -> list[tuple[str, int]]:
    """The ``grpc.aio.server`` channel arguments for ``limits`` (the RPC cap is separate:
    ``maximum_concurrent_rpcs``)."""
    return [
        ("grpc.max_concurrent_streams", limits.max_streams_per_connection),
        ("grpc.keepalive_time_ms", _ms(limits.keepalive_time_s)),
        ("grpc.keepalive_timeout_ms", _ms(limits.keepalive_timeout_s)),
        ("grpc.http2.min_ping_interval_without_data_ms", _ms(limits.min_client_ping_interval_s)),
        ("grpc.http2.max_ping_strikes", 2),
        ("grpc.max_connection_idle_ms", _ms(limits.max_connection_idle_s)),
        ("grpc.max_connection_age_ms", _ms(limits.max_connection_age_s)),
        ("grpc.max_connection_age_grace_ms", _ms(limits.max_connection_age_grace_s)),
    ]


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


class StreamSlots:
    """Open response streams per token id in this process, at most ``limit`` each.

    Callers without a token id (authentication off, the local demo) are not counted: the
    server-wide RPC cap still bounds them.
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._open: Counter[str] = Counter()

    def acquire(self, token_id: str | None) -> None:
        """Takes a slot for ``token_id`` or raises ResourceExhausted naming the limit."""
        if token_id is None:
            return
        if self._open[token_id] >= self._limit:
            raise ResourceExhausted(
                f"this token already has {self._limit} open streams, the limit "
                "(AGENTFLEET_MAX_STREAMS_PER_TOKEN); close one first"
            )
        self._open[token_id] += 1

    def release(self, token_id: str | None) -> None:
        if token_id is None:
            return
        self._open[token_id] -= 1
        if self._open[token_id] <= 0:
            del self._open[token_id]

    def open_streams(self, token_id: str) -> int:
        return self._open[token_id]
