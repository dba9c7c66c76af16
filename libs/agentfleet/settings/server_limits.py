"""The limits every gRPC server applies, as settings: read by :mod:`agentfleet.config`,
applied by :mod:`agentfleet.rpc.grpc_limits`.

A value of its own so that the settings do not import the serving code (config sits below
rpc, and rpc's slots name the caller through auth, which reads config).
"""

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True, slots=True)
class ServerLimits:
    """Per-process limits of one gRPC server; the defaults are the settings' defaults."""

    max_concurrent_rpcs: int = 1000
    """AGENTFLEET_GRPC_MAX_CONCURRENT_RPCS: RPCs in progress at once, open streams included."""
    max_streams_per_connection: int = 100
    """AGENTFLEET_GRPC_MAX_STREAMS_PER_CONNECTION: HTTP/2 streams one connection may open."""
    max_streams_per_token: int = 64
    """AGENTFLEET_MAX_STREAMS_PER_TOKEN: response streams one token may hold open."""
    max_streams_per_project: int = 128
    """AGENTFLEET_MAX_STREAMS_PER_PROJECT: response streams the tokens of one project may hold
    open together (service identities are not counted); two tokens' worth by default, an
    eighth of the server-wide cap, so one project's watchers leave room for seven others."""
    max_unary_per_token: int = 100
    """AGENTFLEET_MAX_UNARY_PER_TOKEN: unary calls one project token may have in progress
    (service identities are not counted)."""
    max_unary_per_project: int = 200
    """AGENTFLEET_MAX_UNARY_PER_PROJECT: unary calls the tokens of one project may have in
    progress together; a fifth of the server-wide cap by default."""
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
