"""Settings of the console (its HTTP port, sessions and cookies)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from agentfleet import config_values as parsers
from agentfleet.config import _Env

DEFAULT_PORT = 8080
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")


@dataclass(frozen=True, kw_only=True, slots=True)
class ConsoleSettings:
    port: int = DEFAULT_PORT
    """AGENTFLEET_CONSOLE_PORT: the console's HTTP port; 0 = any free port."""
    secure_cookies: bool = False
    """AGENTFLEET_CONSOLE_SECURE_COOKIES: mark the session cookie Secure (on whenever the
    console is reached over HTTPS, as behind the Ingress of deploy/k8s)."""
    session_idle_s: float = 8 * 3600
    """AGENTFLEET_CONSOLE_SESSION_IDLE_S: a session unused this long is signed out."""
    session_max_age_s: float = 24 * 3600
    """AGENTFLEET_CONSOLE_SESSION_MAX_AGE_S: a session is signed out this long after sign-in,
    used or not."""
    max_sessions: int = 10_000
    """AGENTFLEET_CONSOLE_MAX_SESSIONS: sessions held at once; past it the oldest goes (the
    store is memory, and who signs in is whoever holds a token: bounded)."""
    allowed_hosts: tuple[str, ...] = LOOPBACK_HOSTS
    """AGENTFLEET_CONSOLE_ALLOWED_HOSTS: the host names (no port) browsers may reach the
    console by, comma-separated; ``*`` = any. Loopback by default, so a page that rebinds its
    own DNS name to 127.0.0.1 cannot talk to a local console (the Host check of
    :mod:`services.console.security`)."""
    max_streams_per_session: int = 8
    """AGENTFLEET_CONSOLE_MAX_STREAMS: live views (server-sent event streams) one session may
    hold open at once; each holds a gRPC watch."""


def load_console_settings(environ: Mapping[str, str] | None = None) -> ConsoleSettings:
    """Raises :class:`agentfleet.config.ConfigError` naming a malformed variable."""
    env = _Env(os.environ if environ is None else environ)
    return ConsoleSettings(
        port=env.get("AGENTFLEET_CONSOLE_PORT", DEFAULT_PORT, parsers.int_range(0, 65535)),
        secure_cookies=env.get("AGENTFLEET_CONSOLE_SECURE_COOKIES", False, parsers.on_off),
        session_idle_s=float(
            env.get("AGENTFLEET_CONSOLE_SESSION_IDLE_S", 8 * 3600, parsers.int_range(60, 7 * 86400))
        ),
        session_max_age_s=float(
            env.get(
                "AGENTFLEET_CONSOLE_SESSION_MAX_AGE_S", 24 * 3600, parsers.int_range(60, 30 * 86400)
            )
        ),
        max_sessions=env.get(
            "AGENTFLEET_CONSOLE_MAX_SESSIONS", 10_000, parsers.int_range(1, 1_000_000)
        ),
        allowed_hosts=env.get("AGENTFLEET_CONSOLE_ALLOWED_HOSTS", LOOPBACK_HOSTS, _host_list),
        max_streams_per_session=env.get(
            "AGENTFLEET_CONSOLE_MAX_STREAMS", 8, parsers.int_range(1, 64)
        ),
    )


def _host_list(raw: str) -> tuple[str, ...]:
    hosts = tuple(h.strip().lower() for h in raw.split(",") if h.strip())
    if not hosts:
        raise ValueError("must name at least one host, or *")
    for host in hosts:
        if host != "*" and (":" in host.strip("[]") and not host.startswith("[")):
            raise ValueError(f"{host!r}: give host names without a port ([::1] for IPv6)")
    return hosts
