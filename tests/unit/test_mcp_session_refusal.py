"""services.toolpool.mcp.marks.note_session_refusal: which HTTP answers to a streamable-HTTP
request mean "the server does not know this session" (so the call is run once on a new
session) and which are the server's answer to the request itself."""

from __future__ import annotations

import json

import httpx2
import pytest

from services.toolpool.mcp.marks import CURRENT_MARK, SendMark, note_session_refusal

URL = "http://127.0.0.1:1/mcp"


def rpc_error(code: int, message: str) -> bytes:
    return json.dumps(
        {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}
    ).encode()


async def refused(status: int, body: bytes, *, method: str = "POST", session: bool = True) -> bool:
    headers = {"mcp-session-id": "abc"} if session else {}
    request = httpx2.Request(method, URL, headers=headers)
    mark = SendMark()
    token = CURRENT_MARK.set(mark)
    try:
        await note_session_refusal(httpx2.Response(status, content=body, request=request))
    finally:
        CURRENT_MARK.reset(token)
    return mark.session_refused


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (404, rpc_error(-32600, "Session not found")),  # the SDK's server
        (404, b"Not Found"),
        (400, rpc_error(-32000, "Bad Request: No valid session ID provided")),  # reference
        (400, b"Bad Request: No valid session ID provided"),
    ],
)
async def test_unknown_sessions(status: int, body: bytes) -> None:
    assert await refused(status, body)


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (404, rpc_error(-32601, "Method not found")),
        (400, rpc_error(-32602, "invalid params: session_name is required")),
        (400, rpc_error(-32600, "Bad Request: body is not JSON")),
        (400, b"Bad Request"),
        (500, b"session exploded"),
        (200, b"{}"),
    ],
)
async def test_answers_to_the_request(status: int, body: bytes) -> None:
    assert not await refused(status, body)


async def test_only_requests_that_carried_a_session() -> None:
    assert not await refused(404, b"Session not found", session=False)
    assert not await refused(404, b"Session not found", method="GET")


async def test_no_mark_no_effect() -> None:
    request = httpx2.Request("POST", URL, headers={"mcp-session-id": "abc"})
    await note_session_refusal(httpx2.Response(404, content=b"x", request=request))
