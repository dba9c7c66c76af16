"""Bearer tokens: creation, hashing, lookup, and the principal of the current request.

A token belongs to one project (roles ``admin`` or ``member``) or is a service token
(``service``, no project) that one service presents to the others. A service token names
its service, and :data:`SERVICE_METHODS` lists the only RPCs that service may call: it may
call them for any project, and nothing else, never an admin method. Only the SHA-256 of a
token is stored; the token itself is shown once, when it is created.
"""

from __future__ import annotations

import hashlib
import secrets
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Generic, Literal, Protocol, TypeVar

import asyncpg

from agentfleet.config import SERVICE_NAMES
from agentfleet.errors import InvalidArgument, PermissionDenied, Unauthenticated

Role = Literal["admin", "member", "service"]
ROLES: tuple[Role, ...] = ("admin", "member", "service")
TOKEN_PREFIX = "af_"
V = TypeVar("V")

# The one table of what each service identity may call on the others (full method names):
# exactly the RPCs its code calls, for any project. Anything else is PERMISSION_DENIED.
SERVICE_METHODS: Mapping[str, frozenset[str]] = {
    "executor": frozenset(
        {
            "/agentfleet.v1.ToolPoolService/ResolveTools",
            "/agentfleet.v1.ToolPoolService/CallTool",
        }
    ),
    "dispatcher": frozenset(
        {
            "/agentfleet.v1.ExecutorService/TriggerRun",
            "/agentfleet.v1.ExecutorService/CancelRun",
            "/agentfleet.v1.ExecutorService/ResumeRun",
        }
    ),
    "toolpool": frozenset(),
    "history": frozenset(),
    # The a2a service calls the executor and history with its caller's own token.
    "a2a": frozenset(),
}
assert sorted(SERVICE_METHODS) == sorted(SERVICE_NAMES)

# RPCs that act inside a run on the run loop's behalf: a project token (member or admin)
# calling them would run a tool outside the run's loop, with no approval rule, doom-loop
# check or tool-call row. Only a service identity whose row lists them may call them.
SERVICE_ONLY_METHODS: frozenset[str] = frozenset({"/agentfleet.v1.ToolPoolService/CallTool"})


@dataclass(frozen=True, kw_only=True, slots=True)
class Principal:
    """Who is calling: the owner of the presented token."""

    token_id: str | None
    project_id: str | None
    """The token's project; None for service tokens and when auth is off."""
    role: Role
    service: str | None = None
    """The service a ``service`` token belongs to (executor, dispatcher, ...); else None."""

    def check_project(self, project_id: str) -> None:
        """Raises PermissionDenied unless this principal may act on ``project_id``."""
        if self.project_id is not None and self.project_id != project_id:
            # Quoted cut, as the caller's other refused values are (revoke's token_id): the
            # text is the caller's, of any length, and goes into the answer and the log.
            raise PermissionDenied(
                f"this token belongs to another project, not {project_id[:80]!r}"
            )

    def check_method(self, method: str, *, admin_only: bool) -> None:
        """Raises PermissionDenied unless this principal may call ``method`` (full name).

        A service token may call only its service's methods in :data:`SERVICE_METHODS`; an
        admin method needs an admin token (of the request's project, see check_project).
        """
        short = method.rsplit("/", 1)[-1]
        if self.role == "service":
            if method not in SERVICE_METHODS.get(self.service or "", frozenset()):
                raise PermissionDenied(f"the {self.service} service's token may not call {short}")
        elif method in SERVICE_ONLY_METHODS and self is not UNRESTRICTED:
            raise PermissionDenied(
                f"{short} is called by the executor for a run's tool calls; a project token "
                "may not call it (start a run instead)"
            )
        elif admin_only and self.role != "admin":
            raise PermissionDenied(f"{short} needs an admin token")


# Auth off (the local demo): every caller is an admin of every project.
UNRESTRICTED = Principal(token_id=None, project_id=None, role="admin")

current_principal: ContextVar[Principal] = ContextVar("current_principal", default=UNRESTRICTED)


def generate_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Authenticator(Protocol):
    revocation_delay_s: float | None
    """At most this long after its revocation a token may still be accepted; None when no
    token is ever revoked (auth off), so open streams need no re-check."""

    async def authenticate(self, token: str | None, *, max_age_s: float | None = None) -> Principal:
        """Returns the token's principal or raises Unauthenticated; ``max_age_s``: accept no
        verdict checked longer ago than that (an open stream's re-check)."""
        ...


class AllowAll:
    """Authentication switched off (AGENTFLEET_AUTH=off)."""

    revocation_delay_s: float | None = None

    async def authenticate(self, token: str | None, *, max_age_s: float | None = None) -> Principal:
        return UNRESTRICTED


@dataclass(frozen=True, kw_only=True, slots=True)
class CreatedToken:
    token: str
    """The bearer token itself; shown once and never stored."""
    token_id: str
    project_id: str | None
    role: Role
    service: str | None = None


class TokenLookup(Protocol):
    async def find_active(self, token_hash: str) -> Principal | None:
        """The principal of an unrevoked token with this hash, or None."""
        ...


class TokenStore:
    """Repository of ``kb.api_tokens``."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def create(
        self, *, project_id: str | None, role: Role, name: str = "", service: str | None = None
    ) -> CreatedToken:
        """Creates a token and returns it in clear, the only time it is available.

        A ``service`` token names its ``service`` (one of SERVICE_NAMES); others name none.
        """
        if role not in ROLES:
            raise InvalidArgument.for_field("role", f"must be one of {', '.join(ROLES)}")
        if role == "service" and project_id is not None:
            raise InvalidArgument.for_field("project_id", "service tokens belong to no project")
        if role == "service" and service not in SERVICE_NAMES:
            raise InvalidArgument.for_field(
                "service", f"a service token must name one of {', '.join(SERVICE_NAMES)}"
            )
        if role != "service" and service is not None:
            raise InvalidArgument.for_field("service", "only service tokens name a service")
        if role != "service" and not project_id:
            raise InvalidArgument.for_field(
                "project_id",
                f"an {role} token needs a project"
                if role == "admin"
                else f"a {role} token needs a project",
            )
        token = generate_token()
        token_id = await self._pool.fetchval(
            """INSERT INTO kb.api_tokens (token_hash, project_id, role, name, service)
               VALUES ($1, $2, $3, $4, $5) RETURNING id::text""",
            hash_token(token),
            project_id,
            role,
            name,
            service,
        )
        return CreatedToken(
            token=token, token_id=token_id, project_id=project_id, role=role, service=service
        )

    async def find_active(self, token_hash: str) -> Principal | None:
        """The principal of an unrevoked token with this hash, or None."""
        row = await self._pool.fetchrow(
            """SELECT id::text, project_id, role, service FROM kb.api_tokens
               WHERE token_hash = $1 AND revoked_at IS NULL""",
            token_hash,
        )
        if row is None:
            return None
        return Principal(
            token_id=row["id"],
            project_id=row["project_id"],
            role=row["role"],
            service=row["service"],
        )

    async def revoke(self, token_id: str) -> bool:
        """Revokes a token; returns whether an active token was revoked."""
        try:
            # Checked here, not left to PostgreSQL's cast, whose DataError is no caller's fault.
            uuid.UUID(token_id)
        except ValueError:
            raise InvalidArgument.for_field(
                "token_id", f"is not a UUID: {token_id[:80]!r}"
            ) from None
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

    Both caches are LRUs. Refusals go to their own, smaller one, so a flood of random
    tokens only evicts other refusals and never pushes a valid hot token out.
    """

    def __init__(
        self,
        store: TokenLookup,
        *,
        ttl_s: float = REVOCATION_DELAY_S,
        max_entries: int = 10_000,
        max_refusals: int = 1_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._ttl_s = ttl_s
        self.revocation_delay_s: float | None = ttl_s
        self._clock = clock
        self._accepted: _VerdictCache[Principal] = _VerdictCache(max_entries)
        self._refused: _VerdictCache[None] = _VerdictCache(max_refusals)

    async def authenticate(self, token: str | None, *, max_age_s: float | None = None) -> Principal:
        if not token:
            raise Unauthenticated("missing bearer token: send 'authorization: Bearer <token>'")
        digest = hash_token(token)
        now = self._clock()
        # A verdict checked more than max_age_s ago is read again (and cached anew): an
        # entry expires ttl_s after its check, so it is that fresh if it outlives this.
        fresh_until = now + max(0.0, self._ttl_s - max_age_s) if max_age_s is not None else now
        principal = self._accepted.get(digest, fresh_until)
        if principal is not None:
            return principal
        if self._refused.has(digest, now):
            raise Unauthenticated("invalid or revoked token")
        principal = await self._store.find_active(digest)
        expires = now + self._ttl_s
        if principal is None:
            self._accepted.discard(digest)
            self._refused.put(digest, None, expires)
            raise Unauthenticated("invalid or revoked token")
        self._refused.discard(digest)
        self._accepted.put(digest, principal, expires)
        return principal


class _VerdictCache(Generic[V]):
    """A bounded LRU of verdicts by token hash, each valid until its expiry time."""

    def __init__(self, max_entries: int) -> None:
        self._max_entries = max_entries
        self._entries: OrderedDict[str, tuple[float, V]] = OrderedDict()

    def get(self, digest: str, now: float) -> V | None:
        entry = self._entries.get(digest)
        if entry is None or entry[0] <= now:
            return None
        self._entries.move_to_end(digest)
        return entry[1]

    def has(self, digest: str, now: float) -> bool:
        entry = self._entries.get(digest)
        if entry is None or entry[0] <= now:
            return False
        self._entries.move_to_end(digest)
        return True

    def put(self, digest: str, value: V, expires: float) -> None:
        self._entries[digest] = (expires, value)
        self._entries.move_to_end(digest)
        while len(self._entries) > self._max_entries:
            self._entries.popitem(last=False)

    def discard(self, digest: str) -> None:
        self._entries.pop(digest, None)

    def __len__(self) -> int:
        return len(self._entries)


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
