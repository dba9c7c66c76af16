"""``${NAME}`` references in MCP server settings, filled from a project's secrets only.

Values come from the ``secrets`` mapping passed in, never from ``os.environ``: the
toolpool's own environment (database password, API keys) must not leak into a server a
project configured. ``$${`` is an escape for a literal ``${``. A reference must be
``${`` + a name of letters, digits and ``_`` not starting with a digit + ``}``; anything
else after ``${`` is a syntax error naming the field.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

# The reference syntax is shared with the save-time checks of both writers of kb.mcp_servers.
from agentfleet.mcp.config import REFERENCE_TOKEN, references
from agentfleet.mcp.servers import McpServerConfig, Transport

from .errors import MissingSecretError


class ProjectSecrets(dict[str, str]):
    """A project's secret values by name, and the secrets that exist but did not decrypt."""

    def __init__(
        self, values: Mapping[str, str] = {}, *, undecryptable: Mapping[str, str] = {}
    ) -> None:
        super().__init__(values)
        self.undecryptable = dict(undecryptable)
        """Name -> why it does not decrypt (no value in it)."""


def interpolate(text: str, secrets: Mapping[str, str], *, field: str) -> str:
    """``text`` with every ``${NAME}`` replaced by ``secrets[NAME]`` and ``$${`` by ``${``.

    Raises :class:`MissingSecretError` naming every missing secret and ``field``, or
    :class:`InvalidArgument` for a malformed reference.
    """
    missing = [(name, field) for name in references(text, field=field) if name not in secrets]
    if missing:
        raise MissingSecretError(missing, undecryptable=_undecryptable(secrets))
    return _substitute(text, secrets)


def _undecryptable(secrets: Mapping[str, str]) -> Mapping[str, str]:
    return secrets.undecryptable if isinstance(secrets, ProjectSecrets) else {}


def _substitute(text: str, secrets: Mapping[str, str]) -> str:
    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$${":
            return "${"
        return secrets[match.group(1)]

    return REFERENCE_TOKEN.sub(replace, text)


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
        raise MissingSecretError(missing, undecryptable=_undecryptable(secrets))
    return ResolvedServer(
        transport=config.transport,
        command=config.command,
        args=tuple(_substitute(a, secrets) for a in config.args),
        env={k: _substitute(v, secrets) for k, v in config.env.items()},
        url=_substitute(config.url, secrets) if config.url is not None else None,
        headers={k: _substitute(v, secrets) for k, v in config.headers.items()},
    )
