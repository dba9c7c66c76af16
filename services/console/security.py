"""What every console response carries, and the checks every change passes.

Everything the console shows came from tenants and models, so the page is built to run no
script it did not ship: a Content-Security-Policy allowing only the console's own scripts and
styles (no inline script, no eval, no framing), and the front end renders data with
``textContent`` only. Changes (every non-GET) need a same-origin request with a JSON body
and, once signed in, the session's CSRF token in ``X-CSRF-Token``.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import urlsplit

CSP = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self'",
        "connect-src 'self'",
        "font-src 'self'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    )
)

HEADERS = (
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
    (b"permissions-policy", b"camera=(), microphone=(), geolocation=()"),
)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
ASGIApp = Callable[
    [Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]
]


class SecurityHeaders:
    """ASGI middleware (not BaseHTTPMiddleware, which buffers and breaks event streams):
    adds :data:`HEADERS` to every response, and ``Cache-Control: no-store`` to the API's."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        api = scope["path"].startswith("/api/")

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers.extend(HEADERS)
                if api:
                    headers.append((b"cache-control", b"no-store"))
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_with_headers)


def same_origin(origin: str | None, host: str | None) -> bool:
    """The Origin header names the host this request was sent to. A cross-site page cannot
    forge Origin (the browser sets it), and cannot send JSON with a custom header to another
    origin without a CORS preflight, which the console never answers."""
    if not origin or not host or origin == "null":
        return False
    parts = urlsplit(origin)
    return parts.scheme in ("http", "https") and parts.netloc.lower() == host.lower()


def host_name(host_header: str | None) -> str:
    """The name of a Host header without its port: ``example.com:8080`` -> ``example.com``,
    ``[::1]:8080`` -> ``[::1]``."""
    host = (host_header or "").strip().lower()
    if host.startswith("["):
        return host.split("]", 1)[0] + "]"
    return host.rsplit(":", 1)[0] if ":" in host else host


class HostCheck:
    """ASGI middleware: a request whose Host is not one of ``allowed`` gets 421, except
    /healthz (probes use the pod's address). Against DNS rebinding: a hostile page whose name
    now resolves to the console's address sends its own name as Host, and its Origin would
    then pass the same-origin check."""

    def __init__(self, app: ASGIApp, allowed: tuple[str, ...]) -> None:
        self.app = app
        self.allowed = frozenset(allowed)

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or "*" in self.allowed or scope["path"] == "/healthz":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        host = host_name(headers.get(b"host", b"").decode("latin-1"))
        if host in self.allowed:
            await self.app(scope, receive, send)
            return
        body = json.dumps(
            {
                "code": "PERMISSION_DENIED",
                "message": "this console is not served under that host name"
                " (AGENTFLEET_CONSOLE_ALLOWED_HOSTS)",
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 421,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
