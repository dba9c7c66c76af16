"""One MCP request on a pooled session, with the SDK's failures translated.

``MCPError`` codes become :class:`McpTimeoutError`, :class:`McpProtocolError` or
:class:`SessionLost` (the session is gone: the pool decides whether to retry);
unexpected result shapes become :class:`McpProtocolError`. Messages go through the
connection's redaction, so no secret value reaches the model or a log, and are cut to their
start (:data:`~services.toolpool.mcp.redaction.MAX_MESSAGE_CHARS`): a server's message may
be megabytes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

import anyio
import httpx2
import mcp_types as types
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from agentfleet.bounded.schema_pool import SchemaCheckTimeout, schema_pool
from agentfleet.bounded.tenant_schema import schema_refusals
from services.toolpool.results import json_size

from .connection import McpConnection, describe
from .errors import McpProtocolError, McpTimeoutError
from .marks import CURRENT_MARK
from .models import McpToolInfo, McpToolList

MAX_TOOL_PAGES = 50
MAX_TOOLS_PER_SERVER = 1000
"""Tools kept of one server. Real servers list tens to a couple of hundred; every tool is
held in the toolpool's cache and walked by each ListTools and ResolveTools of the project."""
MAX_TOOL_SCHEMA_BYTES = 64 * 1024
"""Description and schemas of one tool, as JSON: a tool the model is shown must fit beside
others in its context (a tool result is cut at the same 64 KiB)."""
MAX_UNUSABLE_REPORTED = 5
"""Tools left out for their schemas that ``left_out`` names one by one."""
# Beyond the SDK's own request timeout: a transport stuck before the request is written.
_TIMEOUT_GRACE_S = 2.0

T = TypeVar("T")


class SessionLost(Exception):
    """The session ended under a request."""

    def __init__(self, reason: str, *, unsent: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.unsent = unsent
        """Provably not processed by the server (it refused an unknown session)."""


async def why_lost(conn: McpConnection, lost: SessionLost) -> str:
    """Why the transport ended (a refused message, a dropped stream), else the SDK's word."""
    if not lost.unsent and conn.end_error is None:
        # The owner ends soon after its transport; its cause tells why, and whether the
        # request was refused before reaching the server. (A refused message is known at
        # once; stopping that server may take its grace period.)
        await conn.wait_ended(1.0)
    return conn.end_reason or lost.reason


async def list_tools(conn: McpConnection, timeout_s: float) -> McpToolList:
    """The server's tools, following pagination (at most 50 pages): the first
    :data:`MAX_TOOLS_PER_SERVER`, each within :data:`MAX_TOOL_SCHEMA_BYTES`.

    The rest is left out and said so (``left_out``), not refused: a server a little past a
    limit keeps its other tools, and the listing is cached like a whole one, so a hostile
    server's size is paid once per configuration, not at every ListTools."""
    session = await conn.wait_ready()
    tools: list[McpToolInfo] = []
    oversized = 0
    more = False
    cursor: str | None = None
    for _ in range(MAX_TOOL_PAGES):
        params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await _request(conn, session.list_tools(params=params), timeout_s)
        for tool in page.tools:
            if len(tools) == MAX_TOOLS_PER_SERVER:
                more = True
                break
            info = McpToolInfo(
                name=tool.name,
                description=tool.description or "",
                input_schema=dict(tool.input_schema),
                output_schema=dict(tool.output_schema) if tool.output_schema else None,
            )
            if json_size([info.description, info.input_schema, info.output_schema]) > (
                MAX_TOOL_SCHEMA_BYTES
            ):
                oversized += 1
            else:
                tools.append(info)
        cursor = page.next_cursor
        if more or not cursor:
            break
    tools, unusable = await _usable_schemas(tools)
    return McpToolList(tools=tools, left_out=_left_out(more, oversized, unusable))


async def _usable_schemas(tools: list[McpToolInfo]) -> tuple[list[McpToolInfo], list[str]]:
    """The tools whose schemas :func:`~agentfleet.bounded.tenant_schema.schema_refusal` accepts, and
    why each other is left out. Checked in the schema pool, in batches of at most
    :data:`MAX_TOOL_SCHEMA_BYTES`: a batch past the pool's time limit leaves its tools out,
    and the rest of the listing with them (one hostile listing costs the pool one limit)."""
    kept: list[McpToolInfo] = []
    why: list[str] = []
    batch: list[McpToolInfo] = []
    size = 0
    batches: list[list[McpToolInfo]] = []
    for tool in tools:
        tool_size = json_size([tool.input_schema, tool.output_schema])
        if batch and size + tool_size > MAX_TOOL_SCHEMA_BYTES:
            batches.append(batch)
            batch, size = [], 0
        batch.append(tool)
        size += tool_size
    if batch:
        batches.append(batch)
    for index, group in enumerate(batches):
        schemas = [s for t in group for s in (t.input_schema, t.output_schema or True)]
        try:
            refusals = await schema_pool().run(schema_refusals, schemas)
        except (SchemaCheckTimeout, BrokenProcessPool):
            left = sum(len(g) for g in batches[index:])
            why.append(f"{left} tools are left out: checking their schemas took too long")
            break
        for i, tool in enumerate(group):
            refused = [
                f"its {kind} schema {refusal}"
                for kind, refusal in zip(
                    ("input", "output"), refusals[2 * i : 2 * i + 2], strict=True
                )
                if refusal is not None
            ]
            if refused:
                why.append(f"tool {tool.name!r} is left out: {'; '.join(refused)}")
            else:
                kept.append(tool)
    return kept, why


def _left_out(more: bool, oversized: int, unusable: list[str]) -> str | None:
    reasons = []
    if more:
        reasons.append(
            f"only its first {MAX_TOOLS_PER_SERVER} tools are kept (the limit per server)"
        )
    if oversized:
        reasons.append(
            f"{oversized} tools are left out: their description and schemas exceed "
            f"{MAX_TOOL_SCHEMA_BYTES} bytes (the limit per tool)"
        )
    reasons.extend(unusable[:MAX_UNUSABLE_REPORTED])
    if len(unusable) > MAX_UNUSABLE_REPORTED:
        reasons.append(f"and {len(unusable) - MAX_UNUSABLE_REPORTED} more tools left out")
    return "; ".join(reasons) or None


async def call_tool(
    conn: McpConnection, name: str, arguments: dict[str, Any], timeout_s: float
) -> types.CallToolResult:
    """Calls ``name``; the SDK cancels the request on the server when ``timeout_s`` passes."""
    session = await conn.wait_ready()
    return await _request(
        conn, session.call_tool(name, arguments, read_timeout_seconds=timeout_s), timeout_s
    )


async def _request(conn: McpConnection, request: Awaitable[T], timeout_s: float) -> T:
    try:
        async with asyncio.timeout(timeout_s + _TIMEOUT_GRACE_S):
            return await request
    except TimeoutError:
        raise _timeout(conn, timeout_s) from None
    except MCPError as exc:
        if exc.code == types.REQUEST_TIMEOUT:
            raise _timeout(conn, timeout_s) from None
        message = conn.redact.bounded(exc.message)
        mark = CURRENT_MARK.get()
        # Before CONNECTION_CLOSED: the reference server's refusal uses its code, -32000.
        if (mark is not None and mark.session_refused) or (
            exc.code == types.INVALID_REQUEST and "session" in exc.message.lower()
        ):
            # Streamable HTTP: the server does not know our session id (it restarted, or
            # expired the session), so it rejected the request without running it.
            raise SessionLost(message, unsent=True) from None
        if exc.code == types.CONNECTION_CLOSED:
            raise SessionLost(message, unsent=False) from None
        raise McpProtocolError(
            f"MCP server {conn.label} answered error {exc.code}: {message}", code=exc.code
        ) from None
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, httpx2.HTTPError, OSError) as exc:
        # Transport failures that reach the caller directly rather than as CONNECTION_CLOSED.
        raise SessionLost(conn.redact.bounded(describe(exc)), unsent=False) from None
    except (RuntimeError, ValidationError) as exc:
        # Unexpected result shapes: input-required, claimed results, schema violations.
        reason = conn.redact.bounded(describe(exc))
        raise McpProtocolError(
            f"MCP server {conn.label} sent an unusable result: {reason}", code=0
        ) from None


def _timeout(conn: McpConnection, timeout_s: float) -> McpTimeoutError:
    return McpTimeoutError(f"MCP server {conn.label}: no answer within {timeout_s:g} s")
