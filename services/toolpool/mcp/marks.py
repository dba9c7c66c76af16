"""What one MCP call's request met on its way, per call: the :class:`SendMark` the pool sets
in :data:`CURRENT_MARK` for each attempt. The connection's write wrapper marks that the
request left this process; the streamable-HTTP client's response hook marks that the server
refused the request's session. The pool reads both to decide whether a retry is safe."""

from __future__ import annotations

import contextvars
import json

import httpx2
import mcp_types as types

__all__ = ["CURRENT_MARK", "SendMark", "note_session_refusal"]


class SendMark:
    """What one call's request met: set by the write wrapper once the request has been
    handed to the transport, and by the HTTP client when the server refused its session."""

    __slots__ = ("sent", "session_refused")

    def __init__(self) -> None:
        self.sent = False
        self.session_refused = False
        """Streamable HTTP: the server answered 404, or a 400 naming the session, to a
        request carrying our session id: it does not know the session (it restarted or
        expired it) and ran nothing."""


CURRENT_MARK: contextvars.ContextVar[SendMark | None] = contextvars.ContextVar(
    "mcp_send_mark", default=None
)


# An error whose JSON-RPC code says the method or its parameters (not the session) are at
# fault is the server's answer to the request, not a refusal of the session.
_ANSWERS = frozenset({types.METHOD_NOT_FOUND, types.INVALID_PARAMS})


async def note_session_refusal(response: httpx2.Response) -> None:
    """Marks the calling request's :class:`SendMark` when the server refused its session.

    The SDK turns these answers into JSON-RPC errors whose codes differ by server (the
    SDK's own 404 "Session not found"; the reference server's 400 -32000 "No valid session
    ID", which is the SDK's own code for a closed connection; or a text body the SDK reports
    as "Server returned an error response"), so the HTTP answer itself is the one reliable
    sign."""
    mark = CURRENT_MARK.get()
    request = response.request
    if (
        mark is None
        or request.method != "POST"
        or response.status_code not in (400, 404)
        or "mcp-session-id" not in request.headers
    ):
        return
    # An error body, bounded by the transport's message limit; the SDK reads it again.
    body = await response.aread()
    if _error_code(body) in _ANSWERS:
        return
    # A 400 is also the answer to a bad request: only one naming the session refuses it.
    mark.session_refused = response.status_code == 404 or b"session" in body.lower()


def _error_code(body: bytes) -> object:
    """The JSON-RPC error code of a body, ``None`` when it holds none."""
    try:
        error = json.loads(body).get("error")
    except (ValueError, AttributeError):
        return None
    return error.get("code") if isinstance(error, dict) else None
