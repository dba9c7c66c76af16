"""The A2A HTTP application: per agent, the SDK's JSON-RPC endpoint and the Agent Card.

Every request is checked before anything else reads it: the body is bounded while it is
read (AGENTFLEET_A2A_MAX_BODY_BYTES), and the bearer token must reach an EXTERNAL agent of
the URL's project (401 without a valid token, 403 for another project's, 404 for an agent
that is missing or not external), by the registry's own checks.
"""

from __future__ import annotations

from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes import DefaultServerCallContextBuilder
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH
from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp

from agentfleet.a2a_settings import A2ASettings
from services.a2a.backend import AccessDenied, Backend, Caller, Unavailable
from services.a2a.card import agent_card
from services.a2a.grpc_binding import tenant_of
from services.a2a.handler import AgentRequestHandler

AGENT_PATH = "/{project}/agents/{agent}/"


class _BodyTooLarge(Exception):
    pass


class _CallerContextBuilder(DefaultServerCallContextBuilder):
    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        context.state["caller"] = request.state.caller
        # Never handed on: the handler gets the token only inside the Caller.
        context.state["headers"].pop("authorization", None)
        return context


def build_app(backend: Backend, settings: A2ASettings, *, grpc_port: int = 0) -> ASGIApp:
    """The A2A HTTP application, inside OpenTelemetry's ASGI middleware: a request's W3C
    ``traceparent`` is extracted and its server span is current while the request (and its
    SSE stream) is served, so the gRPC calls made for it -- TriggerRun, WatchRun, CancelRun
    -- carry that trace, and the run it starts joins the caller's trace. ``grpc_port``: the
    gRPC binding's port, named by each card (0: not served)."""
    return OpenTelemetryMiddleware(
        _routes(backend, settings, grpc_port), exclude_spans=["receive", "send"]
    )


def _routes(backend: Backend, settings: A2ASettings, grpc_port: int) -> Starlette:
    dispatcher = JsonRpcDispatcher(
        request_handler=AgentRequestHandler(backend),
        context_builder=_CallerContextBuilder(),
        enable_v0_3_compat=True,
    )

    async def rpc(request: Request) -> Response:
        try:
            await _read_bounded(request, settings.max_body_bytes)
        except _BodyTooLarge:
            return _refusal(413, f"request body larger than {settings.max_body_bytes} bytes")
        caller = _caller(request)
        if isinstance(caller, Response):
            return caller
        try:
            await backend.external_agent(caller)
        except AccessDenied as exc:
            return _refusal(exc.http_status, exc.message)
        except Unavailable as exc:
            return _refusal(503, f"agentfleet unavailable ({exc.code.name})")
        request.state.caller = caller
        return await dispatcher.handle_requests(request)

    async def card(request: Request) -> Response:
        caller = _caller(request)
        if isinstance(caller, Response):
            return caller
        try:
            definition = await backend.external_agent(caller)
        except AccessDenied as exc:
            return _refusal(exc.http_status, exc.message)
        except Unavailable as exc:
            return _refusal(503, f"agentfleet unavailable ({exc.code.name})")
        url = str(request.url_for("rpc", project=caller.project_id, agent=caller.agent_name))
        grpc_target = (
            f"{request.url.hostname}:{grpc_port}" if grpc_port and request.url.hostname else ""
        )
        card_ = agent_card(
            definition,
            url,
            grpc_target=grpc_target,
            tenant=tenant_of(caller.project_id, caller.agent_name),
        )
        return JSONResponse(agent_card_to_dict(card_))

    async def index(request: Request) -> Response:
        token = _bearer(request)
        if token is None:
            return _refusal(401, "a bearer token is required")
        project_id = request.path_params["project"]
        try:
            definitions = await backend.external_agents(project_id, token)
        except AccessDenied as exc:
            return _refusal(exc.http_status, exc.message)
        except Unavailable as exc:
            return _refusal(503, f"agentfleet unavailable ({exc.code.name})")
        agents = [
            {
                "name": d.name,
                "description": d.description,
                "url": str(request.url_for("rpc", project=project_id, agent=d.name)),
                "card_url": str(request.url_for("rpc", project=project_id, agent=d.name))
                + AGENT_CARD_WELL_KNOWN_PATH.lstrip("/"),
            }
            for d in definitions
        ]
        return JSONResponse({"agents": agents})

    return Starlette(
        routes=[
            Route("/{project}/agents", index, methods=["GET"], name="index"),
            Route(AGENT_PATH, rpc, methods=["POST"], name="rpc"),
            Route(
                AGENT_PATH.rstrip("/") + AGENT_CARD_WELL_KNOWN_PATH,
                card,
                methods=["GET"],
                name="card",
            ),
        ]
    )


async def _read_bounded(request: Request, limit: int) -> None:
    """Reads the body, refusing it as soon as it passes ``limit`` bytes; the SDK then parses
    the cached body."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise _BodyTooLarge
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _BodyTooLarge
        chunks.append(chunk)
    request._body = b"".join(chunks)  # Starlette's own cache, read by request.json()


def _bearer(request: Request) -> str | None:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def _caller(request: Request) -> Caller | Response:
    token = _bearer(request)
    if token is None:
        return _refusal(401, "a bearer token is required")
    return Caller(
        project_id=request.path_params["project"],
        agent_name=request.path_params["agent"],
        token=token,
    )


def _refusal(status: int, message: str) -> JSONResponse:
    headers = {"www-authenticate": "Bearer"} if status == 401 else None
    return JSONResponse({"error": message}, status_code=status, headers=headers)
