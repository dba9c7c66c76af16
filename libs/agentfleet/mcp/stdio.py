"""What a stdio MCP server may run: the operator's allowlist and the variables a tenant may set.

Starting a stdio MCP server runs a program on the toolpool host, so which programs run is
the operator's decision, never a tenant's. ``AGENTFLEET_MCP_STDIO_ALLOWLIST`` lists the
command lines allowed; a stdio server is allowed only when ``[command, *args]`` equals one
entry exactly (allowing ``python -m x`` does not allow ``python -c ...``). An empty list (the
default) means no stdio server at all.

The rule applies to every stdio server, whoever defines it: ``UpsertMcpServer`` and
``TestMcpServer`` (toolpool), a product manifest's ``mcp.servers`` (``InstallProduct``,
executor), and again each time the toolpool starts one (the list may have shrunk since the
row was saved). Products installed by the operator may carry stdio servers: the operator puts
their command lines on the allowlist. An entry may hold a ``${NAME}`` reference as written in
the server's configuration; the project's secret then fills that one argument.

A tenant's ``env`` for a stdio server must not steer the dynamic loader or an interpreter of
the allowed program (``LD_PRELOAD``, ``PYTHONPATH``, ``NODE_OPTIONS``, ...). That check is a
denylist and so best effort: it covers the well-known loader and interpreter variables, not
every program's own configuration variables.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping, Sequence

from agentfleet.errors import FieldViolation, PermissionDenied

STDIO_ALLOWLIST_SETTING = "AGENTFLEET_MCP_STDIO_ALLOWLIST"

StdioAllowlist = tuple[tuple[str, ...], ...]
"""Allowed command lines, each as its argv (``[command, *args]``)."""

# Variables read by the dynamic loader, libc, shells and common interpreters at start: one
# of them lets a configuration run code of its choosing inside an allowed program.
LOADER_ENV_NAMES = frozenset(
    {
        "PATH",
        "BASH_ENV",
        "ENV",
        "SHELLOPTS",
        "BASHOPTS",
        "PS4",
        "IFS",
        "CDPATH",
        "GCONV_PATH",
        "GETCONF_DIR",
        "NLSPATH",
        "LOCPATH",
        "CLASSPATH",
        "GEM_HOME",
        "GEM_PATH",
        "BUNDLE_GEMFILE",
        "LUA_INIT",
        "LUA_PATH",
        "LUA_CPATH",
        "TCLLIBPATH",
        "OPENSSL_CONF",
        "OPENSSL_ENGINES",
        "GIT_CONFIG_GLOBAL",
        "GIT_EXEC_PATH",
        "GIT_SSH_COMMAND",
        "EDITOR",
        "VISUAL",
        "PAGER",
        "BROWSER",
    }
)
"""Exact names a tenant may not set (see :data:`LOADER_ENV_PATTERN` for whole families)."""

LOADER_ENV_PATTERN = re.compile(
    r"^(LD_|DYLD_|PYTHON|PERL|RUBY|GLIBC_|MALLOC_|NODE_OPTIONS|NODE_PATH|NODE_REPL_|"
    r"NPM_CONFIG_|UV_|PIP_|DENO_|BUN_|_?JAVA_|JDK_|DOTNET_|CORECLR_|COMPLUS_|BASH_FUNC_)",
    re.IGNORECASE,
)
"""Families of names a tenant may not set: the loader (``LD_*``, ``DYLD_*``), interpreters
(``PYTHON*``, ``NODE_OPTIONS``, ...) and package installers that ``npx``/``uvx`` run
(``NPM_CONFIG_*``, ``UV_*``, ``PIP_*``: a package index is code)."""


def is_loader_variable(name: str) -> bool:
    """Whether ``name`` may steer the loader or an interpreter (refused in a tenant's env)."""
    return name.upper() in LOADER_ENV_NAMES or LOADER_ENV_PATTERN.match(name) is not None


def loader_env_violations(env: Mapping[str, str], prefix: str) -> list[FieldViolation]:
    """One violation per variable of ``env`` that :func:`is_loader_variable`, under ``prefix``."""
    return [
        FieldViolation(
            f"{prefix}[{name}]",
            "may not be set: it controls the program loader or an interpreter",
        )
        for name in env
        if is_loader_variable(name)
    ]


def is_allowed_stdio(command: str, args: Sequence[str], allowlist: StdioAllowlist) -> bool:
    """Whether ``[command, *args]`` equals one allowlist entry exactly."""
    argv = (command, *args)
    return any(argv == entry for entry in allowlist)


def require_allowed_stdio(
    command: str | None,
    args: Sequence[str],
    allowlist: StdioAllowlist,
    *,
    field: str = "mcp_server.command",
) -> None:
    """Raises :class:`PermissionDenied` unless ``[command, *args]`` is on ``allowlist``.

    The one check of the allowlist: every path that saves, tests or starts a stdio server
    calls it. ``field`` names the command in the caller's request.
    """
    if command and is_allowed_stdio(command, args, allowlist):
        return
    if not allowlist:
        reason = f"{STDIO_ALLOWLIST_SETTING} is empty, so stdio MCP servers are disabled"
    else:
        reason = (
            f"the command line is not one of the {len(allowlist)} allowed by "
            f"{STDIO_ALLOWLIST_SETTING} (command and arguments must match an entry exactly)"
        )
    raise PermissionDenied(
        f"{field}: running a stdio MCP server is the operator's decision: {reason}; "
        "use an SSE or streamable HTTP server, or ask the operator to allow the command line"
    )


def format_allowlist(entries: Iterable[Sequence[str]]) -> str:
    """The setting's text for ``entries`` (one shell-quoted command line per line)."""
    return "\n".join(shlex.join(entry) for entry in entries)
