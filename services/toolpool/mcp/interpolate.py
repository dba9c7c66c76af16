"""``${NAME}`` references in MCP server settings, filled from a project's secrets only.

Values come from the ``secrets`` mapping passed in, never from ``os.environ``: the
toolpool's own environment (database password, API keys) must not leak into a server a
project configured. ``$${`` is an escape for a literal ``${``. A reference must be
``${`` + a name of letters, digits and ``_`` not starting with a digit + ``}``; anything
else after ``${`` is a syntax error naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# The reference syntax is shared with the save-time checks of both writers of kb.mcp_servers.
from agentfleet.mcp.config import references
from agentfleet.mcp.servers import McpServerConfig, Transport
from agentfleet.secrets.values import (
    MissingSecretError,
    substitute,
    undecryptable_of,
)


@dataclass(frozen=True, kw_only=True, slots=True)
class ResolvedServer:
    """A server's connection settings with every reference filled: never stored or logged."""

    transport: Transport
    command: str | None
    args: tuple[str, ...]
    env: dict[str, str]
    url: str | None
    headers: dict[str, str]

    def fingerprint(self) -> tuple[object, ...]:
        """Equal for equal settings: a changed config or secret means a new session."""
        return (
            self.transport,
            self.command,
            self.args,
            tuple(sorted(self.env.items())),
            self.url,
            tuple(sorted(self.headers.items())),
        )


def resolve_server(config: McpServerConfig, secrets: Mapping[str, str]) -> ResolvedServer:
    """Fills the references of ``config`` from ``secrets``.

    Every missing secret is reported at once (:class:`MissingSecretError`, with the field
    of each), so one attempt tells the operator everything to set.
    """
    fields: list[tuple[str, str]] = [
        (f"mcp_server.args[{i}]", a) for i, a in enumerate(config.args)
    ]
    fields += [(f"mcp_server.env[{k}]", v) for k, v in config.env.items()]
    if config.url is not None:
        fields.append(("mcp_server.url", config.url))
    fields += [(f"mcp_server.headers[{k}]", v) for k, v in config.headers.items()]
    missing = [
        (name, path)
        for path, text in fields
        for name in references(text, field=path)
        if name not in secrets
    ]
    if missing:
        raise MissingSecretError(missing, undecryptable=undecryptable_of(secrets))
    return ResolvedServer(
        transport=config.transport,
        command=config.command,
        args=tuple(substitute(a, secrets) for a in config.args),
        env={k: substitute(v, secrets) for k, v in config.env.items()},
        url=substitute(config.url, secrets) if config.url is not None else None,
        headers={k: substitute(v, secrets) for k, v in config.headers.items()},
    )
