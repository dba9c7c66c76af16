"""The one set of rules an MCP server configuration must meet before it is stored.

Two paths write ``kb.mcp_servers``: the toolpool's ``UpsertMcpServer`` and the executor's
``InstallProduct`` (a manifest's ``mcp.servers``). Both check each server here, so a row is
valid by the same rules whoever wrote it. Pure, no I/O: every violation is collected, each
naming its field under the caller's ``prefix`` (``mcp_server.url``,
``manifest.mcp.servers[0].env[KEY]``). Whether a stdio command line may run at all is the
operator's allowlist (:mod:`agentfleet.mcp.stdio`, PERMISSION_DENIED), checked after.

Also here: the ``${NAME}`` secret-reference syntax, which the toolpool fills at connect time.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

from agentfleet.errors import FieldViolation, InvalidArgument
from agentfleet.mcp.stdio import loader_env_violations

TRANSPORTS = ("stdio", "sse", "streamable_http")
SERVER_NAME = re.compile(r"^[a-z0-9_-]{1,63}$")
# Exposed names must stay valid model function names (start with a letter or '_').
TOOL_PREFIX = re.compile(r"^([A-Za-z_][A-Za-z0-9_.-]{0,31})?$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
# RFC 9110 token characters.
HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$")
SECRET_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
# One alternative per token, tried left to right: escape, well-formed reference, a "${"
# that starts neither (malformed).
REFERENCE_TOKEN = re.compile(r"\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$\{")

MAX_CONNECT_TIMEOUT_S = 300.0
MAX_CALL_TIMEOUT_S = 3600.0
MAX_ITEMS = 100
MAX_VALUE_CHARS = 8192
MAX_URL_CHARS = 2048

LiteralRefusal = Callable[[str], "str | None"]
"""Why a URL host is refused without a lookup (literal address, localhost, metadata name),
or None: the toolpool's ``EgressPolicy.literal_refusal``."""


class McpServerFields(Protocol):
    """What is checked of a server, whichever value carries it (toolpool or manifest)."""

    @property
    def name(self) -> str: ...

    @property
    def transport(self) -> str: ...

    @property
    def command(self) -> str | None: ...

    @property
    def args(self) -> Sequence[str]: ...

    @property
    def env(self) -> Mapping[str, str]: ...

    @property
    def url(self) -> str | None: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    @property
    def tool_prefix(self) -> str | None: ...

    @property
    def connect_timeout_s(self) -> float: ...

    @property
    def call_timeout_s(self) -> float: ...


HIDDEN_VALUE = "(hidden: a literal value; admins see it)"
"""What a member reads in place of an MCP setting that names no secret."""


def member_view(server: Mapping[str, Any]) -> dict[str, Any]:
    """An MCP server's settings (``env``, ``headers``, ``url``) as a member may read them.

    Credentials belong in secrets, named by ``${NAME}``; an admin may still have typed one
    into a header or an environment value, or a URL's password or query. Members see the
    values that name a secret as they are and every other such value hidden."""
    view = dict(server)
    for key in ("env", "headers"):
        values = view.get(key) or {}
        view[key] = {k: v if _names_secret(v) else HIDDEN_VALUE for k, v in values.items()}
    url = view.get("url")
    if url:
        parts = urlsplit(url)
        netloc = parts.netloc
        if parts.password is not None and not _names_secret(parts.password):
            netloc = netloc.replace(f":{parts.password}@", ":***@", 1)
        query = parts.query if not parts.query or _names_secret(parts.query) else "***"
        view["url"] = urlunsplit(parts._replace(netloc=netloc, query=query))
    return view


def _names_secret(text: str) -> bool:
    return any(match.group(1) for match in REFERENCE_TOKEN.finditer(text))


def references(text: str, *, field: str) -> list[str]:
    """Names referenced by ``text``, in order; InvalidArgument naming ``field`` if malformed."""
    names: list[str] = []
    for match in REFERENCE_TOKEN.finditer(text):
        token = match.group(0)
        if token == "$${":
            continue
        if match.group(1) is None:
            raise InvalidArgument.for_field(
                field,
                "malformed ${...} reference at offset "
                f"{match.start()}: write ${{NAME}} (letters, digits, _) or $${{ for a literal ${{",
            )
        names.append(match.group(1))
    return names


def server_violations(
    server: McpServerFields, *, prefix: str = "mcp_server", timeout_suffix: str = ""
) -> list[FieldViolation]:
    """Every violation of ``server``, each naming its field under ``prefix``; empty if valid.

    ``timeout_suffix``: how the caller spells the timeouts after ``connect_timeout`` (the
    proto's Durations have none, the manifest's seconds are ``_s``).
    """
    rules = _Rules(prefix)
    if not SERVER_NAME.match(server.name):
        rules.bad("name", "must be 1-63 lowercase letters, digits, '-' or '_'")
    if server.transport not in TRANSPORTS:
        rules.bad("transport", f"must be one of {', '.join(TRANSPORTS)}")
    elif server.transport == "stdio":
        rules.stdio(server)
    else:
        rules.http(server)
    if server.tool_prefix is not None and not TOOL_PREFIX.match(server.tool_prefix):
        rules.bad(
            "tool_prefix",
            "must be empty or up to 32 letters, digits, '_', '.' or '-' starting with a "
            "letter or '_'",
        )
    connect, call = f"connect_timeout{timeout_suffix}", f"call_timeout{timeout_suffix}"
    rules.timeout(connect, server.connect_timeout_s, MAX_CONNECT_TIMEOUT_S)
    rules.timeout(call, server.call_timeout_s, MAX_CALL_TIMEOUT_S)
    return rules.out


def url_destination_violations(
    server: McpServerFields, refusal: LiteralRefusal, *, prefix: str = "mcp_server"
) -> list[FieldViolation]:
    """A violation naming ``<prefix>.url`` when an HTTP server's URL host is refused as
    written (``refusal``: a literal address, ``localhost``, a metadata name).

    Names are not resolved here: the toolpool checks them at every connect. A host with a
    ``${NAME}`` in it can only be judged once filled, at connect time too.
    """
    if server.transport == "stdio" or not server.url:
        return []
    try:
        host = urlsplit(server.url).hostname
    except ValueError:
        return []  # malformed: reported by server_violations
    if not host or "${" in host:
        return []
    reason = refusal(host)
    if reason is None:
        return []
    return [FieldViolation(f"{prefix}.url", f"refused destination: {reason}")]


class _Rules:
    """Collects the violations of one server under one field prefix."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.out: list[FieldViolation] = []

    def bad(self, field: str, description: str) -> None:
        self.out.append(FieldViolation(f"{self.prefix}.{field}", description))

    def stdio(self, server: McpServerFields) -> None:
        command = server.command
        if not command or not command.strip():
            self.bad("command", "is required for the stdio transport")
        elif len(command) > MAX_VALUE_CHARS or "\0" in command:
            self.bad("command", f"must be at most {MAX_VALUE_CHARS} characters, without NUL")
        if server.url:
            self.bad("url", "must be empty for the stdio transport")
        if server.headers:
            self.bad("headers", "must be empty for the stdio transport")
        if len(server.args) > MAX_ITEMS:
            self.bad("args", f"at most {MAX_ITEMS} arguments")
        for i, arg in enumerate(server.args[:MAX_ITEMS]):
            self.value(f"args[{i}]", arg)
        if len(server.env) > MAX_ITEMS:
            self.bad("env", f"at most {MAX_ITEMS} variables")
        for key, value in list(server.env.items())[:MAX_ITEMS]:
            if not ENV_NAME.match(key):
                self.bad(
                    f"env[{key}]", "name must be letters, digits and '_', not starting with a digit"
                )
            self.value(f"env[{key}]", value)
        self.out.extend(loader_env_violations(server.env, f"{self.prefix}.env"))

    def http(self, server: McpServerFields) -> None:
        kind = server.transport
        if server.command:
            self.bad("command", f"must be empty for the {kind} transport")
        if server.args:
            self.bad("args", f"must be empty for the {kind} transport")
        if server.env:
            self.bad("env", f"must be empty for the {kind} transport")
        url = server.url or ""
        if not url:
            self.bad("url", f"is required for the {kind} transport")
        elif len(url) > MAX_URL_CHARS:
            self.bad("url", f"must be at most {MAX_URL_CHARS} characters")
        else:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                self.bad("url", "must be an absolute http:// or https:// URL")
            else:
                self.references("url", url)
        if len(server.headers) > MAX_ITEMS:
            self.bad("headers", f"at most {MAX_ITEMS} headers")
        for key, value in list(server.headers.items())[:MAX_ITEMS]:
            if not HEADER_NAME.match(key):
                self.bad(f"headers[{key}]", "is not a valid HTTP header name")
            if "\r" in value or "\n" in value:
                self.bad(f"headers[{key}]", "must not contain line breaks")
            else:
                self.value(f"headers[{key}]", value)

    def value(self, field: str, value: str) -> None:
        if len(value) > MAX_VALUE_CHARS or "\0" in value:
            self.bad(field, f"must be at most {MAX_VALUE_CHARS} characters, without NUL")
            return
        self.references(field, value)

    def references(self, field: str, value: str) -> None:
        try:
            names = references(value, field=f"{self.prefix}.{field}")
        except InvalidArgument as exc:
            self.out.append(exc.violations[0])
            return
        for name in names:
            if not SECRET_NAME.match(name):
                self.bad(field, f"secret name {name!r} is longer than 128 characters")

    def timeout(self, field: str, value: float, limit: float) -> None:
        if not math.isfinite(value) or value <= 0 or value > limit:
            self.bad(field, f"must be more than 0 and at most {limit:g} seconds")
