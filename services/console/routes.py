"""The console's application: its routes (pages, session, API) around the shared state, behind
the Host check and the security headers. Composed here, above :mod:`services.console.app`
(the state, session and request helpers) and :mod:`services.console.api` (the API routes),
so neither imports the other's composition.
"""

from __future__ import annotations

from typing import Any

from starlette.applications import Starlette
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from agentfleet.console_settings import ConsoleSettings
from services.console.api import api_routes
from services.console.app import (
    STATIC,
    Console,
    _sign_out,
    authed,
    current_session,
    healthz,
    index,
    sign_in,
)
from services.console.backend import Backend
from services.console.security import HostCheck, SecurityHeaders


def build_app(settings: ConsoleSettings, backend: Backend) -> Any:
    app = Starlette(
        routes=[
            Route("/", index),
            Route("/healthz", healthz),
            Route("/api/session", sign_in, methods=["POST"]),
            Route("/api/session", current_session, methods=["GET"]),
            Route("/api/session", authed(_sign_out), methods=["DELETE"]),
            *api_routes(),
            Mount("/static", StaticFiles(directory=STATIC), name="static"),
        ]
    )
    app.state.console = Console(settings, backend)
    return SecurityHeaders(HostCheck(app, settings.allowed_hosts))
