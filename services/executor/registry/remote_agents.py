"""Remote A2A agents of a project (``kb.remote_agents``): what spawn_agents may run as a
remote child (issue 33, consume).

A row keeps its headers as written: ``${NAME}`` references to the project's sealed secrets
are filled only when a connection is made (:mod:`services.executor.a2a_client`), with the
toolpool's own interpolation, so no secret value is stored here or returned by an RPC.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import asyncpg

from agentfleet.errors import (
    AlreadyExists,
    FieldViolation,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
)
from agentfleet.mcp.config import references
from agentfleet.postgres.project_rows import project_name_page

NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")
MAX_URL_CHARS = 2048
MAX_HEADERS = 32
MAX_HEADER_VALUE_CHARS = 8192
MAX_DESCRIPTION_CHARS = 4000
MAX_REMOTE_AGENTS_PER_PROJECT = 500
DEFAULT_TIMEOUT_S = 300.0
MAX_TIMEOUT_S = 86400.0
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}")
# Headers the client sets itself: a tenant must not change framing or the trace it joins.
_RESERVED_HEADERS = frozenset(
    {"host", "content-length", "transfer-encoding", "connection", "traceparent", "tracestate"}
)


@dataclass(frozen=True, kw_only=True, slots=True)
class RemoteAgent:
    """One row of ``kb.remote_agents``."""

    name: str
    card_url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    """As written: ``${NAME}`` references kept."""
    description: str = ""
    timeout_s: float = DEFAULT_TIMEOUT_S
    product_name: str = ""
    card_name: str = ""
    """The card's own name, read when it was registered (not stored: the card may change)."""
    id: str = ""


def check_remote_agent(
    agent: RemoteAgent,
    *,
    url_refusal: Callable[[str], str | None],
    where: str = "remote_agent",
) -> RemoteAgent:
    """``agent`` with defaults filled; :class:`InvalidArgument` naming every bad field.

    ``url_refusal``: the MCP egress policy's save-time check of a URL host (a literal
    private address, localhost, a metadata name), so a refused card URL is never stored.
    """
    bad: list[FieldViolation] = []
    if not NAME.fullmatch(agent.name):
        bad.append(FieldViolation(f"{where}.name", "must be 1-128 of [A-Za-z0-9_.-]"))
    parts = urlsplit(agent.card_url)
    if len(agent.card_url) > MAX_URL_CHARS:
        bad.append(FieldViolation(f"{where}.card_url", f"longer than {MAX_URL_CHARS} chars"))
    elif parts.scheme not in ("http", "https") or not parts.hostname:
        bad.append(FieldViolation(f"{where}.card_url", "must be an http(s) URL with a host"))
    elif parts.username or parts.password:
        bad.append(FieldViolation(f"{where}.card_url", "must not hold credentials: use headers"))
    else:
        refusal = url_refusal(parts.hostname)
        if refusal is not None:
            bad.append(FieldViolation(f"{where}.card_url", f"refused destination: {refusal}"))
    if len(agent.headers) > MAX_HEADERS:
        bad.append(FieldViolation(f"{where}.headers", f"at most {MAX_HEADERS} headers"))
    for key, value in agent.headers.items():
        path = f"{where}.headers[{key}]"
        if not _HEADER_NAME.fullmatch(key) or key.lower() in _RESERVED_HEADERS:
            bad.append(FieldViolation(path, "not a header name a remote agent may be sent"))
        elif len(value) > MAX_HEADER_VALUE_CHARS or "\r" in value or "\n" in value:
            bad.append(FieldViolation(path, f"at most {MAX_HEADER_VALUE_CHARS} chars, one line"))
        else:
            try:
                references(value, field=path)
            except InvalidArgument as exc:
                bad.extend(exc.violations)
    if len(agent.description) > MAX_DESCRIPTION_CHARS:
        bad.append(
            FieldViolation(f"{where}.description", f"longer than {MAX_DESCRIPTION_CHARS} chars")
        )
    timeout_s = agent.timeout_s or DEFAULT_TIMEOUT_S
    if not 0 < timeout_s <= MAX_TIMEOUT_S:
        bad.append(FieldViolation(f"{where}.timeout_s", f"must be in (0, {MAX_TIMEOUT_S:g}] s"))
    if bad:
        raise InvalidArgument("; ".join(f"{v.field}: {v.description}" for v in bad), violations=bad)
    return RemoteAgent(
        name=agent.name,
        card_url=agent.card_url,
        headers=dict(agent.headers),
        description=agent.description,
        timeout_s=timeout_s,
    )


_COLUMNS = """r.id::text AS id, r.name, r.card_url, r.headers, r.description, r.timeout_s,
       coalesce(p.name, '') AS product_name"""
_UPSERT = """
WITH room AS (
    SELECT count(*) AS n FROM kb.remote_agents
    WHERE project_id = $1 AND name <> $2
), clash AS (
    SELECT 1 FROM kb.agent_definitions WHERE project_id = $1 AND name = $2
)
INSERT INTO kb.remote_agents AS r (project_id, name, card_url, headers, description, timeout_s)
SELECT $1, $2, $3, $4::jsonb, $5, $6
WHERE (SELECT n FROM room) < $7 AND NOT EXISTS (SELECT 1 FROM clash)
ON CONFLICT (project_id, name) DO UPDATE
   SET card_url = EXCLUDED.card_url, headers = EXCLUDED.headers,
       description = EXCLUDED.description, timeout_s = EXCLUDED.timeout_s,
       product_id = NULL, updated_at = now()
RETURNING r.id::text AS id, r.name, r.card_url, r.headers, r.description, r.timeout_s,
          '' AS product_name
"""


def _agent(row: Mapping[str, Any]) -> RemoteAgent:
    return RemoteAgent(
        id=row["id"],
        name=row["name"],
        card_url=row["card_url"],
        headers=dict(row["headers"]),
        description=row["description"],
        timeout_s=float(row["timeout_s"]),
        product_name=row["product_name"],
    )


class RemoteAgentRepository:
    """Every statement on ``kb.remote_agents``; each scoped by project."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def upsert(
        self,
        project_id: str,
        agent: RemoteAgent,
        *,
        max_per_project: int = MAX_REMOTE_AGENTS_PER_PROJECT,
    ) -> RemoteAgent:
        """Creates or replaces ``agent`` (checked by :func:`check_remote_agent` first).
        :class:`AlreadyExists` when a local definition has the name,
        :class:`ResourceExhausted` past ``max_per_project``."""
        row = await self._pool.fetchrow(
            _UPSERT,
            project_id,
            agent.name,
            agent.card_url,
            dict(agent.headers),
            agent.description,
            agent.timeout_s,
            max_per_project,
        )
        if row is not None:
            return _agent(row)
        if await self._pool.fetchval(
            "SELECT 1 FROM kb.agent_definitions WHERE project_id = $1 AND name = $2",
            project_id,
            agent.name,
        ):
            raise AlreadyExists(
                f"remote_agent.name: {agent.name!r} is an agent definition of project "
                f"{project_id!r}; a remote agent needs a name of its own"
            )
        raise ResourceExhausted(
            f"project {project_id!r} has {max_per_project} remote agents, the limit; delete "
            "one first"
        )

    @staticmethod
    async def install_in(
        conn: asyncpg.Connection, project_id: str, agent: RemoteAgent, *, product_id: str
    ) -> bool:
        """A product's remote agent, in the install's transaction: created, or replaced when
        the product already owns it. False when the name is another owner's (nothing
        written)."""
        row = await conn.fetchval(
            """INSERT INTO kb.remote_agents AS r
                   (project_id, name, card_url, headers, description, timeout_s, product_id)
               VALUES ($1, $2, $3, $4::jsonb, $5, $6, $7::uuid)
               ON CONFLICT (project_id, name) DO UPDATE
                  SET card_url = EXCLUDED.card_url, headers = EXCLUDED.headers,
                      description = EXCLUDED.description, timeout_s = EXCLUDED.timeout_s,
                      updated_at = now()
                  WHERE r.product_id = EXCLUDED.product_id
               RETURNING r.id""",
            project_id,
            agent.name,
            agent.card_url,
            dict(agent.headers),
            agent.description,
            agent.timeout_s,
            product_id,
        )
        return row is not None

    @staticmethod
    async def remove_unlisted_in(
        conn: asyncpg.Connection, project_id: str, product_id: str, keep: list[str]
    ) -> list[str]:
        """Deletes the product's remote agents not in ``keep``; their names."""
        rows = await conn.fetch(
            """DELETE FROM kb.remote_agents
               WHERE project_id = $1 AND product_id = $2::uuid AND name <> ALL($3::text[])
               RETURNING name""",
            project_id,
            product_id,
            keep,
        )
        return sorted(r["name"] for r in rows)

    async def page(
        self, project_id: str, *, page_size: int, page_token: str
    ) -> tuple[list[RemoteAgent], str]:
        """One page of the project's remote agents by name, and the next page's token."""
        rows, token = await project_name_page(
            self._pool,
            f"SELECT {_COLUMNS} FROM kb.remote_agents r LEFT JOIN kb.products p "
            "ON p.id = r.product_id",
            alias="r",
            project_id=project_id,
            page_size=page_size,
            page_token=page_token,
            listing="remote_agents",
        )
        return [_agent(r) for r in rows], token

    async def list_all(self, project_id: str) -> list[RemoteAgent]:
        """The project's remote agents by name (bounded by the per-project limit)."""
        rows = await self._pool.fetch(
            f"""SELECT {_COLUMNS} FROM kb.remote_agents r
                LEFT JOIN kb.products p ON p.id = r.product_id
                WHERE r.project_id = $1 ORDER BY r.name LIMIT $2""",
            project_id,
            MAX_REMOTE_AGENTS_PER_PROJECT,
        )
        return [_agent(r) for r in rows]

    async def find(self, project_id: str, name: str) -> RemoteAgent | None:
        """The remote agent ``name`` of the project, or None."""
        row = await self._pool.fetchrow(
            f"""SELECT {_COLUMNS} FROM kb.remote_agents r
                LEFT JOIN kb.products p ON p.id = r.product_id
                WHERE r.project_id = $1 AND r.name = $2""",
            project_id,
            name,
        )
        return _agent(row) if row is not None else None

    async def get(self, project_id: str, name: str) -> RemoteAgent:
        """:meth:`find`, :class:`NotFound` naming the agent when there is none."""
        found = await self.find(project_id, name)
        if found is None:
            raise NotFound(f"remote agent {name!r} not found in project {project_id!r}")
        return found

    async def delete(self, project_id: str, name: str) -> None:
        """Deletes it; :class:`NotFound` when there is none."""
        deleted = await self._pool.fetchval(
            "DELETE FROM kb.remote_agents WHERE project_id = $1 AND name = $2 RETURNING id",
            project_id,
            name,
        )
        if deleted is None:
            raise NotFound(f"remote agent {name!r} not found in project {project_id!r}")
