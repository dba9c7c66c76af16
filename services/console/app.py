"""The console's Starlette application: static files, sign-in and sign-out, and the JSON and
event-stream API the page calls (:mod:`services.console.api`)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from google.protobuf.message import Message
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response

from agentfleet.console_settings import ConsoleSettings
from agentfleet.v1 import history_pb2
from services.console.backend import Backend, CallFailed, to_json
from services.console.security import same_origin
from services.console.sessions import Session, SessionStore

STATIC = Path(__file__).parent / "static"
MAX_BODY_BYTES = 1024 * 1024
MAX_PROJECT_CHARS = 128
MAX_TOKEN_CHARS = 4096
UNSAFE = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class BadRequest(Exception):
    """The browser sent something malformed: 400 naming the field."""

    def __init__(self, field: str, message: str, status: int = 400) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
        self.status = status


class Console:
    """What the handlers share: settings, the gRPC backend, the session store."""

    def __init__(self, settings: ConsoleSettings, backend: Backend) -> None:
        self.settings = settings
        self.backend = backend
        self.sessions = SessionStore(
            idle_s=settings.session_idle_s,
            max_age_s=settings.session_max_age_s,
            max_sessions=settings.max_sessions,
        )

    @property
    def cookie_name(self) -> str:
        # __Host-: the browser takes it only from a secure origin, Path=/, no Domain.
        return "__Host-agentfleet_console" if self.settings.secure_cookies else "agentfleet_console"

    def session_of(self, request: Request) -> Session | None:
        return self.sessions.get(request.cookies.get(self.cookie_name))


Handler = Callable[[Request, Console, Session], Awaitable[Response]]


def error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"code": code, "message": message}, status_code=status)


def authed(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    """A handler that needs a session: 401 without one; for a change, a same-origin request
    and the session's CSRF token. A token the services reject signs its sessions out."""

    async def endpoint(request: Request) -> Response:
        console: Console = request.app.state.console
        session = console.session_of(request)
        if session is None:
            return error(401, "UNAUTHENTICATED", "sign in first")
        if request.method in UNSAFE:
            refused = csrf_refusal(request)
            if refused is None and not session.csrf_matches(request.headers.get("x-csrf-token")):
                refused = "the X-CSRF-Token header does not match this session"
            if refused is not None:
                return error(403, "PERMISSION_DENIED", refused)
        try:
            return await handler(request, console, session)
        except BadRequest as exc:
            return error(exc.status, "INVALID_ARGUMENT", f"{exc.field}: {exc.message}")
        except CallFailed as exc:
            if exc.code == "UNAUTHENTICATED":
                console.sessions.drop_token(session.token)
            return error(exc.http_status, exc.code, exc.message)

    return endpoint


def csrf_refusal(request: Request) -> str | None:
    """Why a change is refused before any session check, or None."""
    if not same_origin(request.headers.get("origin"), request.headers.get("host")):
        return "cross-origin request refused (the Origin header must name this console)"
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type != "application/json":
        return "a change must be sent as application/json"
    return None


async def read_json(request: Request) -> dict[str, Any]:
    """The JSON object body, read up to :data:`MAX_BODY_BYTES` (a longer body is refused
    before it is all read)."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > MAX_BODY_BYTES):
        raise BadRequest("body", f"larger than {MAX_BODY_BYTES} bytes", 413)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise BadRequest("body", f"larger than {MAX_BODY_BYTES} bytes", 413)
        chunks.append(chunk)
    try:
        body = json.loads(b"".join(chunks) or b"{}")
    except ValueError as exc:
        raise BadRequest("body", f"is not JSON ({exc})") from None
    if not isinstance(body, dict):
        raise BadRequest("body", "must be a JSON object")
    return body


def text_field(body: dict[str, Any], name: str, *, limit: int, required: bool = True) -> str:
    value = body.get(name, "")
    if not isinstance(value, str):
        raise BadRequest(name, "must be a string")
    value = value.strip() if name != "input" else value
    if required and not value:
        raise BadRequest(name, "is required")
    if len(value) > limit:
        raise BadRequest(name, f"longer than {limit} characters")
    return value


def session_reply(session: Session) -> dict[str, str]:
    return {"project_id": session.project_id, "csrf_token": session.csrf}


async def sign_in(request: Request) -> Response:
    console: Console = request.app.state.console
    refused = csrf_refusal(request)
    if refused is not None:
        return error(403, "PERMISSION_DENIED", refused)
    try:
        body = await read_json(request)
        project_id = text_field(body, "project_id", limit=MAX_PROJECT_CHARS)
        token = text_field(body, "token", limit=MAX_TOKEN_CHARS)
    except BadRequest as exc:
        return error(exc.status, "INVALID_ARGUMENT", f"{exc.field}: {exc.message}")
    try:
        # The services decide whether the token is good for the project: one read that every
        # member of a project may make.
        await console.backend.call(
            console.backend.history.ListRuns,
            history_pb2.ListRunsRequest(project_id=project_id, page_size=1),
            token,
        )
    except CallFailed as exc:
        if exc.code in ("UNAUTHENTICATED", "PERMISSION_DENIED", "NOT_FOUND"):
            return error(401, "UNAUTHENTICATED", "this token does not sign in to that project")
        return error(exc.http_status, exc.code, exc.message)
    # A new id at every sign-in (no session fixation); the old session, if any, ends.
    console.sessions.delete(request.cookies.get(console.cookie_name))
    session = console.sessions.create(project_id=project_id, token=token)
    reply = JSONResponse(session_reply(session))
    reply.set_cookie(
        console.cookie_name,
        session.id,
        max_age=int(console.settings.session_max_age_s),
        path="/",
        httponly=True,
        samesite="strict",
        secure=console.settings.secure_cookies,
    )
    return reply


async def current_session(request: Request) -> Response:
    console: Console = request.app.state.console
    session = console.session_of(request)
    if session is None:
        return error(401, "UNAUTHENTICATED", "not signed in")
    return JSONResponse(session_reply(session))


async def _sign_out(request: Request, console: Console, session: Session) -> Response:
    console.sessions.delete(session.id)
    reply = JSONResponse({"signed_out": True})
    reply.delete_cookie(
        console.cookie_name,
        path="/",
        httponly=True,
        samesite="strict",
        secure=console.settings.secure_cookies,
    )
    return reply


async def index(request: Request) -> Response:
    return FileResponse(STATIC / "index.html", media_type="text/html; charset=utf-8")


async def healthz(request: Request) -> Response:
    return JSONResponse({"status": "SERVING"})


async def relayed(console: Console, method: Any, message: Message, session: Session) -> Response:
    """One RPC with the signed-in user's token, its answer as the page's JSON (proto3 JSON:
    :func:`services.console.backend.to_json`); a failed call is the error answer."""
    reply = await console.backend.call(method, message, session.token)
    return JSONResponse(to_json(reply))
