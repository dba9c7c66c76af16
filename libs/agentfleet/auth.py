"""Bearer tokens: creation, hashing, lookup, and the principal of the current request.

A token belongs to one project (roles ``admin`` or ``member``) or is a service token
(``service``, no project) that services present to each other. Only the SHA-256 of a token
is stored; the token itself is shown once, when it is created.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Literal, Protocol

import asyncpg

from agentfleet.errors import InvalidArgument, PermissionDenied, Unauthenticated

Role = Literal["admin", "member", "service"]
ROLES: tuple[Role, ...] = ("admin", "member", "service")
TOKEN_PREFIX = "af_"


@dataclass(frozen=True, kw_only=True, slots=True)
class Principal:
    """Who is calling: the owner of the presented token."""

    token_id: str | None
    project_id: str | None
    """The token's project; None for service tokens and when auth is off."""
    role: Role

    def check_project(self, project_id: str) -> None:
        """Raises PermissionDenied unless this principal may act on ``project_id``."""
        if self.project_id is not None and self.project_id != project_id:
            raise PermissionDenied(f"this token belongs to another project, not {project_id!r}")


# Auth off (the local demo): every caller may act on every project.
UNRESTRICTED = Principal(token_id=None, project_id=None, role="service")

current_principal: ContextVar[Principal] = ContextVar("current_principal", default=UNRESTRICTED)


def generate_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Authenticator(Protocol):
    async def authenticate(self, token: str | None) -> Principal:
        """Returns the token's principal or raises Unauthenticated."""
        ...


class AllowAll:
    """Authentication switched off (AGENTFLEET_AUTH=off)."""

    async def authenticate(self, token: str | None) -> Principal:
        return UNRESTRICTED


@dataclass(frozen=True, kw_only=True, slots=True)
class CreatedToken:
    token: str
    """The bearer token itself; shown once and never stored."""
    token_id: str
    project_id: str | None
    role: Role


class TokenStore:
    """Repository of ``kb.api_tokens``."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def create(self, *, project_id: str | None, role: Role, name: str = "") -> CreatedToken:
        """Creates a token and returns it in clear, the only time it is available."""
        if role not in ROLES:
            raise InvalidArgument.for_field("role", f"must be one of {', '.join(ROLES)}")
        if role == "service" and project_id is not None:
            raise InvalidArgument.for_field("project_id", "service tokens belong to no project")
        if role != "service" and not project_id:
            raise InvalidArgument.for_field(
                "project_id",
                f"an {role} token needs a project"
                if role == "admin"
                else f"a {role} token needs a project",
            )
        token = generate_token()
        token_id = await self._pool.fetchval(
            """INSERT INTO kb.api_tokens (token_hash, project_id, role, name)
               VALUES ($1, $2, $3, $4) RETURNING id::text""",
            hash_token(token),
            project_id,
            role,
            name,
        )
        return CreatedToken(token=token, token_id=token_id, project_id=project_id, role=role)

    async def find_active(self, token_hash: str) -> Principal | None:
        """The principal of an unrevoked token with this hash, or None."""
        row = await self._pool.fetchrow(
            """SELECT id::text, project_id, role FROM kb.api_tokens
               WHERE token_hash = $1 AND revoked_at IS NULL""",
            token_hash,
        )
        if row is None:
            return None
        return Principal(token_id=row["id"], project_id=row["project_id"], role=row["role"])

    async def revoke(self, token_id: str) -> bool:
        """Revokes a token; returns whether an active token was revoked."""
        status = await self._pool.execute(
            """UPDATE kb.api_tokens SET revoked_at = now()
               WHERE id = $1::uuid AND revoked_at IS NULL""",
            token_id,
        )
        return status.endswith(" 1")


REVOCATION_DELAY_S = 10.0
"""At most this long after its revocation a token may still be accepted by a service that
checked it just before (the verdict cache below); after that every RPC refuses it."""


class TokenAuthenticator:
    """Checks tokens against the database, caching verdicts for ``ttl_s``.

    The cache keeps the database off the hot path of every RPC (a hit costs one SHA-256 and
    a dict lookup); its TTL bounds how long a revoked token keeps working:
    :data:`REVOCATION_DELAY_S` by default, 0 for exact checks on every call.
    """

    def __init__(
        self,
        store: TokenStore,
        *,
        ttl_s: float = REVOCATION_DELAY_S,
        max_entries: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._ttl_s = ttl_s
        self._max_entries = max_entries
        self._clock = clock
        self._cache: dict[str, tuple[float, Principal | None]] = {}

    async def authenticate(self, token: str | None) -> Principal:
        if not token:
            raise Unauthenticated("missing bearer token: send 'authorization: Bearer <token>'")
        digest = hash_token(token)
        now = self._clock()
        cached = self._cache.get(digest)
        if cached is not None and cached[0] > now:
            principal = cached[1]
        else:
            principal = await self._store.find_active(digest)
            if len(self._cache) >= self._max_entries:
                self._cache.clear()
            self._cache[digest] = (now + self._ttl_s, principal)
        if principal is None:
            raise Unauthenticated("invalid or revoked token")
        return principal


def bearer_token(metadata: tuple[tuple[str, str | bytes], ...] | None) -> str | None:
    """Extracts the token from ``authorization: Bearer <token>`` metadata."""
    for key, value in metadata or ():
        if key == "authorization":
            text = value.decode() if isinstance(value, bytes) else value
            scheme, _, token = text.partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
            return None
    return None
