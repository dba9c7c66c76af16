"""McpServer.health: what this replica's pool has seen of a project's MCP server (its
breaker, last success and failure, live session), for ListMcpServers. No I/O: reading it
never connects to the server."""

from __future__ import annotations

from datetime import UTC, datetime

from google.protobuf import timestamp_pb2

from agentfleet.timestamps import duration_proto, timestamp_proto
from agentfleet.v1 import toolpool_pb2
from services.toolpool.mcp import McpClientPool

_STATES = {
    "closed": toolpool_pb2.MCP_BREAKER_STATE_CLOSED,
    "open": toolpool_pb2.MCP_BREAKER_STATE_OPEN,
    "half_open": toolpool_pb2.MCP_BREAKER_STATE_HALF_OPEN,
}


def server_health(pool: McpClientPool, project_id: str, name: str) -> toolpool_pb2.McpServerHealth:
    # Keyed by (project, name): a server of another project is never looked at.
    health = toolpool_pb2.McpServerHealth(
        breaker=toolpool_pb2.MCP_BREAKER_STATE_CLOSED,
        connected=pool.is_connected(project_id, name),
    )
    breaker = pool.breaker(project_id, name)
    if breaker is None:
        return health
    state = breaker.state
    health.breaker = _STATES[state]
    health.consecutive_failures = breaker.consecutive_failures
    health.last_error = breaker.last_error
    if breaker.last_success_at is not None:
        health.last_success_time.CopyFrom(_stamp(breaker.last_success_at))
    if breaker.last_failure_at is not None:
        health.last_failure_time.CopyFrom(_stamp(breaker.last_failure_at))
    if state == "open":
        health.retry_after.CopyFrom(duration_proto(breaker.retry_after_s()))
    return health


def _stamp(seconds: float) -> timestamp_pb2.Timestamp:
    stamp = timestamp_proto(datetime.fromtimestamp(seconds, UTC))
    assert stamp is not None  # a datetime always has one
    return stamp
