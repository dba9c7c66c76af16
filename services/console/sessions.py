"""The console's server-side session store: the browser holds only a random session id (an
HttpOnly, SameSite=Strict cookie); the project token it signed in with stays here, in this
process's memory, and is sent only to the services, as that user's bearer token.

Memory, not PostgreSQL, on purpose: the console talks to the platform only over the services'
gRPC APIs (it has no database credential), and a console restart signing everyone out is a
fair price for holding no tokens at rest. Several replicas need session affinity (deploy/k8s).
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass


@dataclass(kw_only=True, slots=True)
class Session:
    id: str
    project_id: str
    token: str
    csrf: str
    created: float
    last_seen: float
    open_streams: int = 0

    def csrf_matches(self, presented: str | None) -> bool:
        """Constant-time: the CSRF token is a secret of the page, not of the attacker."""
        return presented is not None and hmac.compare_digest(presented, self.csrf)


class SessionStore:
    """Sessions by id, bounded in number, each signed out after ``idle_s`` unused or
    ``max_age_s`` after sign-in."""

    def __init__(self, *, idle_s: float, max_age_s: float, max_sessions: int) -> None:
        self._idle_s = idle_s
        self._max_age_s = max_age_s
        self._max = max_sessions
        self._sessions: OrderedDict[str, Session] = OrderedDict()

    def create(self, *, project_id: str, token: str) -> Session:
        now = time.monotonic()
        session = Session(
            id=secrets.token_urlsafe(32),
            project_id=project_id,
            token=token,
            csrf=secrets.token_urlsafe(32),
            created=now,
            last_seen=now,
        )
        self._sessions[session.id] = session
        while len(self._sessions) > self._max:
            self._sessions.popitem(last=False)  # the least recently used goes first
        return session

    def get(self, session_id: str | None) -> Session | None:
        if not session_id:
            return None
        session = self._sessions.get(session_id)
        if session is None:
            return None
        now = time.monotonic()
        if now - session.last_seen > self._idle_s or now - session.created > self._max_age_s:
            del self._sessions[session_id]
            return None
        session.last_seen = now
        self._sessions.move_to_end(session_id)
        return session

    def delete(self, session_id: str | None) -> None:
        if session_id:
            self._sessions.pop(session_id, None)

    def drop_token(self, token: str) -> None:
        """Signs out every session of a token the services no longer accept."""
        for session_id in [s.id for s in self._sessions.values() if s.token == token]:
            del self._sessions[session_id]

    def __len__(self) -> int:
        return len(self._sessions)
