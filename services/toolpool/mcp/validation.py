"""Checks of an MCP server configuration before it is stored; pure, no I/O.

Every violation is collected, so one answer lists everything to fix; each names its field
(``mcp_server.url``, ``mcp_server.env[KEY]``, ...). Whether a stdio server may run at all is
the operator's allowlist (:func:`check_stdio_allowed`, PERMISSION_DENIED), checked after.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from urllib.parse import urlsplit

from agentfleet.errors import FieldViolation, InvalidArgument
from agentfleet.mcp_stdio import StdioAllowlist, loader_env_violations, require_allowed_stdio

from .egress import EgressPolicy
from .interpolate import SECRET_NAME, references
from .models import TRANSPORTS, McpServerConfig

SERVER_NAME = re.compile(r"^[a-z0-9_-]{1,63}$")
# Exposed names must stay valid model function names (start with a letter or '_').
TOOL_PREFIX = re.compile(r"^([A-Za-z_][A-Za-z0-9_.-]{0,31})?$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
# RFC 9110 token characters.
HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$")

MAX_CONNECT_TIMEOUT_S = 300.0
MAX_CALL_TIMEOUT_S = 3600.0
MAX_ITEMS = 100
MAX_VALUE_CHARS = 8192
MAX_URL_CHARS = 2048

_Bad = Callable[[str, str], None]


def validate_server(config: McpServerConfig) -> None:
    """Raises :class:`InvalidArgument` listing every violation of ``config``."""
    violations = server_violations(config)
    if violations:
        raise InvalidArgument.for_fields(violations)


def check_stdio_allowed(config: McpServerConfig, allowlist: StdioAllowlist) -> None:
    """Whether ``config`` may be started now: :class:`PermissionDenied` when it is a stdio
    server whose command line is not on the operator's allowlist (see
    :mod:`agentfleet.mcp_stdio`), :class:`InvalidArgument` when its ``env`` sets a loader or
    interpreter variable. Run on save, on test, and each time the toolpool starts one (the
    allowlist may have shrunk, or the row predate the checks, since it was saved).
    """
    if config.transport != "stdio":
        return
    require_allowed_stdio(config.command, config.args, allowlist)
    violations = loader_env_violations(config.env, "mcp_server.env")
    if violations:
        raise InvalidArgument.for_fields(violations)


def check_url_destination(config: McpServerConfig, egress: EgressPolicy) -> None:
    """:class:`InvalidArgument` naming ``mcp_server.url`` when an HTTP server's URL host is
    a literal address, ``localhost`` or a metadata name the egress policy refuses.

    Names are not resolved here: they are checked where the connection is made, at every
    connect (:mod:`~services.toolpool.mcp.egress`). A host with a ``${NAME}`` in it can
    only be judged once filled, at connect time too.
    """
    if config.transport == "stdio" or not config.url:
        return
    try:
        host = urlsplit(config.url).hostname
    except ValueError:
        return  # malformed: reported by server_violations
    if not host or "${" in host:
        return
    reason = egress.literal_refusal(host)
    if reason is not None:
        raise InvalidArgument.for_field("mcp_server.url", f"refused destination: {reason}")


def server_violations(config: McpServerConfig) -> list[FieldViolation]:
    """Every violation of ``config``, each naming its field; empty when it is valid."""
    out: list[FieldViolation] = []

    def bad(field: str, description: str) -> None:
        out.append(FieldViolation(field, description))

    if not config.project_id:
        bad("project_id", "is required")
    if not SERVER_NAME.match(config.name):
        bad("mcp_server.name", "must be 1-63 lowercase letters, digits, '-' or '_'")
    if config.transport not in TRANSPORTS:
        bad("mcp_server.transport", f"must be one of {', '.join(TRANSPORTS)}")
    elif config.transport == "stdio":
        _check_stdio(config, bad)
    else:
        _check_http(config, bad)
    if config.tool_prefix is not None and not TOOL_PREFIX.match(config.tool_prefix):
        bad(
            "mcp_server.tool_prefix",
            "must be empty or up to 32 letters, digits, '_', '.' or '-' starting with a "
            "letter or '_'",
        )
    _check_timeout(
        "mcp_server.connect_timeout", config.connect_timeout_s, MAX_CONNECT_TIMEOUT_S, bad
    )
    _check_timeout("mcp_server.call_timeout", config.call_timeout_s, MAX_CALL_TIMEOUT_S, bad)
    return out


def _check_stdio(config: McpServerConfig, bad: _Bad) -> None:
    if not config.command or not config.command.strip():
        bad("mcp_server.command", "is required for the stdio transport")
    elif len(config.command) > MAX_VALUE_CHARS or "\0" in config.command:
        bad("mcp_server.command", f"must be at most {MAX_VALUE_CHARS} characters, without NUL")
    if config.url:
        bad("mcp_server.url", "must be empty for the stdio transport")
    if config.headers:
        bad("mcp_server.headers", "must be empty for the stdio transport")
    if len(config.args) > MAX_ITEMS:
        bad("mcp_server.args", f"at most {MAX_ITEMS} arguments")
    for i, arg in enumerate(config.args[:MAX_ITEMS]):
        _check_value(f"mcp_server.args[{i}]", arg, bad)
    if len(config.env) > MAX_ITEMS:
        bad("mcp_server.env", f"at most {MAX_ITEMS} variables")
    for key, value in list(config.env.items())[:MAX_ITEMS]:
        if not ENV_NAME.match(key):
            bad(
                f"mcp_server.env[{key}]",
                "name must be letters, digits and '_', not starting with a digit",
            )
        _check_value(f"mcp_server.env[{key}]", value, bad)
    for violation in loader_env_violations(config.env, "mcp_server.env"):
        bad(violation.field, violation.description)


def _check_http(config: McpServerConfig, bad: _Bad) -> None:
    kind = config.transport
    if config.command:
        bad("mcp_server.command", f"must be empty for the {kind} transport")
    if config.args:
        bad("mcp_server.args", f"must be empty for the {kind} transport")
    if config.env:
        bad("mcp_server.env", f"must be empty for the {kind} transport")
    url = config.url or ""
    if not url:
        bad("mcp_server.url", f"is required for the {kind} transport")
    elif len(url) > MAX_URL_CHARS:
        bad("mcp_server.url", f"must be at most {MAX_URL_CHARS} characters")
    else:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            bad("mcp_server.url", "must be an absolute http:// or https:// URL")
        else:
            _check_references("mcp_server.url", url, bad)
    if len(config.headers) > MAX_ITEMS:
        bad("mcp_server.headers", f"at most {MAX_ITEMS} headers")
    for key, value in list(config.headers.items())[:MAX_ITEMS]:
        if not HEADER_NAME.match(key):
            bad(f"mcp_server.headers[{key}]", "is not a valid HTTP header name")
        if "\r" in value or "\n" in value:
            bad(f"mcp_server.headers[{key}]", "must not contain line breaks")
        else:
            _check_value(f"mcp_server.headers[{key}]", value, bad)


def _check_value(field: str, value: str, bad: _Bad) -> None:
    if len(value) > MAX_VALUE_CHARS or "\0" in value:
        bad(field, f"must be at most {MAX_VALUE_CHARS} characters, without NUL")
        return
    _check_references(field, value, bad)


def _check_references(field: str, value: str, bad: _Bad) -> None:
    try:
        names = references(value, field=field)
    except InvalidArgument as exc:
        out = exc.violations[0]
        bad(out.field, out.description)
        return
    for name in names:
        if not SECRET_NAME.match(name):
            bad(field, f"secret name {name!r} is longer than 128 characters")


def _check_timeout(field: str, value: float, limit: float, bad: _Bad) -> None:
    if not math.isfinite(value) or value <= 0 or value > limit:
        bad(field, f"must be more than 0 and at most {limit:g} seconds")
