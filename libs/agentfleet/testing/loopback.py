"""A TCP server on loopback for a test's ``async with``: the trap, redirector or failing
endpoint a hostile-caller test points a URL at."""

from __future__ import annotations

import asyncio
from typing import Self


class LoopbackServer:
    """Listens on 127.0.0.1 (a free port) while the ``async with`` lasts; a subclass answers
    each connection in :meth:`answer`."""

    def __init__(self) -> None:
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self.answer, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    @property
    def port(self) -> int:
        assert self._server is not None, "the server listens only inside its async with"
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError
