"""Debian's Firefox ESR for Playwright's WebDriver BiDi client (``channel="moz-firefox"``).

Playwright 1.65 opens every browser context with ``emulation.setMediaFeaturesOverride``
(prefers-color-scheme), which Firefox ESR 153 does not implement yet ("unknown command"), so
no context can be opened and no page loaded. This script is the executable Playwright
launches: it starts the real Firefox with the same arguments, stands between the two on
the BiDi WebSocket, passes every message through unchanged, and answers only an
``emulation.*`` command Firefox calls unknown as done (no emulation: the page is what
Firefox renders by default). Each such command is written to stderr, into Playwright's
browser log. Firefox's stderr is passed on, with the line announcing its BiDi endpoint
rewritten to this proxy's, as Playwright reads it (``WebDriver BiDi listening on ws://...``).

Run by the console's browser tests (:mod:`tests.e2e.test_console_browser`), as
``python tests/e2e/firefox_bidi_shim.py FIREFOX ARGS...``.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from typing import Any

import websockets

LISTENING = re.compile(r"WebDriver BiDi listening on (ws://\S+)")


async def _relay(client: Any, upstream: str) -> None:
    async with websockets.connect(upstream + client.request.path, max_size=None) as firefox:
        methods: dict[int, str] = {}

        async def to_firefox() -> None:
            async for message in client:
                command = json.loads(message)
                if isinstance(command.get("id"), int):
                    methods[command["id"]] = str(command.get("method", ""))
                await firefox.send(message)

        async def to_playwright() -> None:
            async for message in firefox:
                reply = json.loads(message)
                method = methods.pop(reply.get("id"), "") if "id" in reply else ""
                if (
                    reply.get("type") == "error"
                    and reply.get("error") == "unknown command"
                    and method.startswith("emulation.")
                ):
                    sys.stderr.write(f"firefox_bidi_shim: {method} is unknown here: skipped\n")
                    message = json.dumps({"type": "success", "id": reply["id"], "result": {}})
                await client.send(message)

        _done, pending = await asyncio.wait(
            [asyncio.create_task(to_firefox()), asyncio.create_task(to_playwright())],
            return_when=asyncio.FIRST_COMPLETED,
        )
        for task in pending:
            task.cancel()


async def main(firefox: str, arguments: list[str]) -> int:
    process = await asyncio.create_subprocess_exec(
        firefox, *arguments, stderr=asyncio.subprocess.PIPE
    )
    assert process.stderr is not None
    upstream = None
    while upstream is None:
        line = (await process.stderr.readline()).decode(errors="replace")
        if not line:
            return await process.wait()
        found = LISTENING.search(line)
        if found:
            upstream = found.group(1)
        else:
            sys.stderr.write(line)
    async with websockets.serve(
        lambda client: _relay(client, upstream), "127.0.0.1", 0, max_size=None
    ) as server:
        port = server.sockets[0].getsockname()[1]
        sys.stderr.write(f"WebDriver BiDi listening on ws://127.0.0.1:{port}\n")
        sys.stderr.flush()
        while line_bytes := await process.stderr.readline():
            sys.stderr.write(line_bytes.decode(errors="replace"))
            sys.stderr.flush()
        return await process.wait()


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1], sys.argv[2:])))
