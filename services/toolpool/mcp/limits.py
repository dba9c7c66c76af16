"""The most bytes one JSON-RPC message from an MCP server may take, on every transport.

The SDK's transports read each message whole before parsing it, and the toolpool then
encodes a result again to bound it (:func:`~services.toolpool.results.bound_result`): a
server answering 200 MB held the shared toolpool's memory and event loop for a minute.
The model is shown 64 KiB of a result, so what lies far past that is only counted; a
message is therefore refused once it passes :data:`MAX_MESSAGE_BYTES`, before it is
buffered whole, and the session that carried it is closed (:class:`MessageLimit`).

- stdio: :class:`LineBuffer`, the line reader of :mod:`.stdio`.
- SSE and streamable HTTP: :class:`LimitedTransport` under the HTTP client the transports
  are given, counting each response body (JSON) or each event of an event stream.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import httpx2

MAX_MESSAGE_BYTES = 8 * 1024 * 1024
"""One message from a server. Far above the 64 KiB a result is cut to, so a large result
(a log of a few MB, a screenshot's base64, a 4 MB error of escapes, JSON-escaped to 4.5 MB)
is still shown cut, not refused; read linearly, such a message costs the loop tens of ms."""

# Where an event of an event stream ends (a blank line, in any of the three line endings).
_EVENT_ENDS = (b"\n\n", b"\r\r", b"\r\n\r\n")


class MessageTooLarge(Exception):
    """A server sent a message the toolpool will not read (too large, or unboundable)."""


class MessageLimit:
    """The limit for one session: counters report to ``on_exceeded``, which closes it.

    A transport may swallow an error raised inside it (the SDK logs and goes on for some
    HTTP failures), so the session is closed through this callback, not by the raise."""

    def __init__(self, on_exceeded: Callable[[MessageTooLarge], None]) -> None:
        self._on_exceeded = on_exceeded

    def exceeded(self, what: str = "a message") -> MessageTooLarge:
        error = MessageTooLarge(
            f"the server sent {what} larger than {MAX_MESSAGE_BYTES} bytes, the limit for "
            "one MCP message; the session was closed"
        )
        self._on_exceeded(error)
        return error

    def refuse(self, error: MessageTooLarge) -> MessageTooLarge:
        self._on_exceeded(error)
        return error


class LineBuffer:
    """Splits a byte stream into lines, holding at most :data:`MAX_MESSAGE_BYTES` of one.

    Linear in the bytes fed: pieces are kept in a list and joined once per line."""

    def __init__(self, limit: MessageLimit) -> None:
        self._limit = limit
        self._pieces: list[bytes] = []
        self._size = 0

    def feed(self, chunk: bytes) -> list[bytes]:
        """The lines ``chunk`` completes; raises :class:`MessageTooLarge` past the limit."""
        lines: list[bytes] = []
        start = 0
        while (end := chunk.find(b"\n", start)) != -1:
            self._add(chunk[start:end])
            lines.append(b"".join(self._pieces))
            self._pieces, self._size = [], 0
            start = end + 1
        self._add(chunk[start:])
        return lines

    def _add(self, piece: bytes) -> None:
        self._size += len(piece)
        if self._size > MAX_MESSAGE_BYTES:
            raise self._limit.exceeded("a line")
        if piece:
            self._pieces.append(piece)


class LimitedTransport(httpx2.AsyncBaseTransport):
    """An HTTP transport whose responses are refused past :data:`MAX_MESSAGE_BYTES`: a
    whole body, or one event of an event stream (a stream itself may run for hours)."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, limit: MessageLimit) -> None:
        self._inner = inner
        self._limit = limit

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._inner.handle_async_request(request)
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding != "identity":
            # Decoding happens above this transport, so a compressed body could expand far
            # past what was counted; the client asks for identity (connection.py).
            await response.aclose()
            raise self._limit.refuse(
                MessageTooLarge(
                    f"the server sent a body with Content-Encoding {encoding!r} although the "
                    "toolpool asked for none: its size cannot be bounded; the session was closed"
                )
            )
        media_type = response.headers.get("content-type", "").partition(";")[0]
        events = media_type.strip().lower() == "text/event-stream"
        response.stream = _LimitedStream(response.stream, self._limit, events=events)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


class _LimitedStream(httpx2.AsyncByteStream):
    def __init__(self, inner: object, limit: MessageLimit, *, events: bool) -> None:
        assert isinstance(inner, httpx2.AsyncByteStream)
        self._inner = inner
        self._limit = limit
        self._events = events

    async def __aiter__(self) -> AsyncIterator[bytes]:
        size = 0
        tail = b""  # the end of the previous chunk, for an event end split across chunks
        async for chunk in self._inner:
            size += len(chunk)
            if self._events:
                window = tail + chunk
                ends = [window.rfind(end) + len(end) for end in _EVENT_ENDS if end in window]
                if ends:
                    size = len(window) - max(ends)
                tail = window[-3:]
            if size > MAX_MESSAGE_BYTES:
                raise self._limit.exceeded("an event" if self._events else "a response")
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()
