"""Settings of the a2a service's HTTP side (its gRPC side has the usual AGENTFLEET_A2A_PORT)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from agentfleet import config_values as parsers
from agentfleet.config import _Env

DEFAULT_HTTP_PORT = 50055
DEFAULT_MAX_BODY_BYTES = 1024 * 1024
DEFAULT_GRPC_BINDING_PORT = 50057


@dataclass(frozen=True, kw_only=True, slots=True)
class A2ASettings:
    http_port: int = DEFAULT_HTTP_PORT
    """AGENTFLEET_A2A_HTTP_PORT: the A2A JSON-RPC and agent-card port; 0 = any free port."""
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    """AGENTFLEET_A2A_MAX_BODY_BYTES: largest request body read before parsing (1 MiB)."""
    grpc_binding_port: int = DEFAULT_GRPC_BINDING_PORT
    """AGENTFLEET_A2A_GRPC_BINDING_PORT: the A2A gRPC binding's port (lf.a2a.v1.A2AService);
    0 = any free port, -1 = not served."""


def load_a2a_settings(environ: Mapping[str, str] | None = None) -> A2ASettings:
    """Raises :class:`agentfleet.config.ConfigError` naming a malformed variable."""
    env = _Env(os.environ if environ is None else environ)
    return A2ASettings(
        http_port=env.get(
            "AGENTFLEET_A2A_HTTP_PORT", DEFAULT_HTTP_PORT, parsers.int_range(0, 65535)
        ),
        max_body_bytes=env.get(
            "AGENTFLEET_A2A_MAX_BODY_BYTES",
            DEFAULT_MAX_BODY_BYTES,
            parsers.int_range(1024, 64 * 1024 * 1024),
        ),
        grpc_binding_port=env.get(
            "AGENTFLEET_A2A_GRPC_BINDING_PORT",
            DEFAULT_GRPC_BINDING_PORT,
            parsers.int_range(-1, 65535),
        ),
    )
