"""A project's secret values, for ``${NAME}`` references only: resolved (decrypted) from
``kb.project_secrets`` and substituted into the settings that name them.

Every outbound peer a project configures (MCP servers in the toolpool, remote A2A agents in
the executor) fills its references here, so there is one resolution and one syntax. Values
come from the project's secrets, never from ``os.environ``: a process's own environment
(database password, API keys) must not leak into a peer a project configured. ``$${`` is
an escape for a literal ``${``; the reference syntax is :mod:`agentfleet.mcp.config`'s.

Internal: a resolved value is never returned by an RPC, logged or put in a span.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import asyncpg
import structlog

from agentfleet.errors import FailedPrecondition
from agentfleet.mcp.config import REFERENCE_TOKEN, references
from agentfleet.secrets.project_secrets import ProjectSecretRepository
from agentfleet.secrets.secrets_crypto import SecretsKeyMissing, SecretsKeyring

log = structlog.get_logger(__name__)


class MissingSecretError(FailedPrecondition):
    """One or more ``${NAME}`` references name secrets the project does not have (or has,
    but cannot decrypt with the configured keys)."""

    def __init__(
        self, missing: list[tuple[str, str]], *, undecryptable: Mapping[str, str] = {}
    ) -> None:
        self.missing = missing
        """(secret name, field path) pairs, in configuration order."""
        unset = [(n, f) for n, f in missing if n not in undecryptable]
        broken = [(n, f) for n, f in missing if n in undecryptable]
        parts = []
        if unset:
            listed = ", ".join(f"${{{name}}} in {field}" for name, field in unset)
            parts.append(f"project secret not set: {listed}")
        if broken:
            listed = ", ".join(f"${{{n}}} in {f} ({undecryptable[n]})" for n, f in broken)
            parts.append(f"project secret cannot be decrypted: {listed}")
        super().__init__("; ".join(parts))


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
        raise MissingSecretError(missing, undecryptable=undecryptable_of(secrets))
    return substitute(text, secrets)


def undecryptable_of(secrets: Mapping[str, str]) -> Mapping[str, str]:
    return secrets.undecryptable if isinstance(secrets, ProjectSecrets) else {}


def substitute(text: str, secrets: Mapping[str, str]) -> str:
    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$${":
            return "${"
        return secrets[match.group(1)]

    return REFERENCE_TOKEN.sub(replace, text)


async def resolve_secrets(
    pool: asyncpg.Pool, keyring: SecretsKeyring | None, project_id: str
) -> ProjectSecrets:
    """Every secret of the project with its value, for interpolation only.

    A secret that does not decrypt (its key is gone, the row was altered or copied from
    another project) is left out and named in ``undecryptable``, so a peer using it fails
    with that reason and the others still work.
    """
    values: dict[str, str] = {}
    undecryptable: dict[str, str] = {}
    for secret in await ProjectSecretRepository(pool).stored(project_id):
        if secret.sealed is None:
            values[secret.name] = str(secret.value)  # written before encryption
            continue
        try:
            if keyring is None:
                raise SecretsKeyMissing()
            values[secret.name] = keyring.open(project_id, secret.name, secret.sealed)
        except FailedPrecondition as exc:
            undecryptable[secret.name] = exc.message
            log.warning("secret_undecryptable", project_id=project_id, reason=exc.message)
    return ProjectSecrets(values, undecryptable=undecryptable)
