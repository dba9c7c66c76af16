"""The HTTP side of the limit on one MCP message (services/toolpool/mcp/limits.py): a body,
or one event of an event stream, is refused past MAX_MESSAGE_BYTES while it is read, and
the session is told; a long stream of small events is not; compressed bodies are refused."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx2
import pytest

from services.toolpool.mcp.limits import (
    MAX_MESSAGE_BYTES,
    LimitedTransport,
    LineBuffer,
    MessageLimit,
    MessageTooLarge,
)

CHUNK = 64 * 1024


class _Chunks(httpx2.AsyncByteStream):
    def __init__(self, piece: bytes, total: int) -> None:
        self._piece, self._total = piece, total

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for _ in range(self._total // len(self._piece)):
            yield self._piece


def client(
    body: bytes, total: int, headers: dict[str, str], refused: list[str]
) -> httpx2.AsyncClient:
    def answer(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers=headers, stream=_Chunks(body, total))

    limit = MessageLimit(lambda error: refused.append(str(error)))
    return httpx2.AsyncClient(transport=LimitedTransport(httpx2.MockTransport(answer), limit))


async def read(http: httpx2.AsyncClient) -> int:
    size = 0
    async with http.stream("GET", "http://mcp.test/") as response:
        async for chunk in response.aiter_bytes():
            size += len(chunk)
    return size


async def test_a_body_past_the_limit_is_refused_and_the_session_told() -> None:
    refused: list[str] = []
    json = {"content-type": "application/json"}
    async with client(b"A" * CHUNK, 2 * MAX_MESSAGE_BYTES, json, refused) as http:
        with pytest.raises(MessageTooLarge, match=str(MAX_MESSAGE_BYTES)):
            await read(http)
    assert "a response" in refused[0]


async def test_many_small_events_pass_one_huge_event_does_not() -> None:
    refused: list[str] = []
    events = {"content-type": "text/event-stream"}
    event = b"event: message\r\ndata: " + b"x" * 1000 + b"\r\n\r\n"
    async with client(event, 3 * MAX_MESSAGE_BYTES, events, refused) as http:
        assert await read(http) > 2 * MAX_MESSAGE_BYTES
    assert not refused
    async with client(b"data: " + b"x" * CHUNK, 2 * MAX_MESSAGE_BYTES, events, refused) as http:
        with pytest.raises(MessageTooLarge):
            await read(http)
    assert "an event" in refused[0]


async def test_a_compressed_body_is_refused() -> None:
    refused: list[str] = []
    gzip = {"content-type": "application/json", "content-encoding": "gzip"}
    async with client(b"A" * CHUNK, CHUNK, gzip, refused) as http:
        with pytest.raises(MessageTooLarge, match="gzip"):
            await read(http)
    assert refused


def test_lines_are_split_in_linear_time_and_bounded() -> None:
    refused: list[str] = []
    lines = LineBuffer(MessageLimit(lambda error: refused.append(str(error))))
    assert lines.feed(b'{"a":') == []
    assert lines.feed(b'1}\n{"b":2}\n{"c"') == [b'{"a":1}', b'{"b":2}']
    assert lines.feed(b":3}\n") == [b'{"c":3}']
    for _ in range(MAX_MESSAGE_BYTES // CHUNK):
        assert lines.feed(b"A" * CHUNK) == []
    with pytest.raises(MessageTooLarge):
        lines.feed(b"A")
    assert refused
