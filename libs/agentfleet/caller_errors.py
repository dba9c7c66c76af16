"""What a caller is told when a handler raises: one rule for the gRPC servers and for the
built-in tools the executor runs in its own process (which must answer as the toolpool's
server would)."""

from __future__ import annotations

import uuid

import asyncpg
import grpc
import structlog
from opentelemetry import trace

from agentfleet.errors import AgentFleetError, Unavailable, Unimplemented
from agentfleet.reconnect import is_disconnect

__all__ = ["caller_error", "internal_failure"]

log = structlog.get_logger(__name__)


def caller_error(exc: BaseException, method: str) -> AgentFleetError | None:
    """The error the caller gets for ``exc``, or None when it is our own failure (INTERNAL:
    the caller gets only a reference, see :func:`internal_failure`)."""
    if isinstance(exc, NotImplementedError):
        exc = Unimplemented(f"{method} is not implemented yet")
    if isinstance(exc, asyncpg.InterfaceError) and "pool is clos" in str(exc):
        # Our own shutdown closed the pool under a handler the server had not cancelled yet.
        exc = Unavailable("the service is shutting down: retry (another replica serves it)")
    if is_disconnect(exc):
        # PostgreSQL restarting or failing over: the caller may retry; no traceback each.
        exc = Unavailable(f"database unavailable: {type(exc).__name__}: {exc}")
    if isinstance(exc, AgentFleetError) and exc.code != grpc.StatusCode.INTERNAL:
        return exc
    return None


def internal_failure(exc: BaseException) -> str:
    """Logs ``exc`` with its traceback under a fresh reference; returns the message the
    caller gets instead (no stack trace, no detail of ours leaves the server)."""
    reference = uuid.uuid4().hex[:12]
    log.error("rpc_failed", reference=reference, exc_info=exc)
    trace.get_current_span().record_exception(exc)
    return f"internal error (reference {reference})"
