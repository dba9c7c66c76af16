"""Live views as server-sent events: the console holds the gRPC watch (WatchRun,
WatchTaskGraph) with the session's token and forwards each event as one ``data:`` line of
proto3 JSON. A stream ends when the watch ends (``event: end``), when the session signs out,
or when the page goes away; a session holds at most ``max_streams_per_session`` at once."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from agentfleet.v1 import dispatcher_pb2, history_pb2
from services.console import params
from services.console.app import Console, error
from services.console.backend import CallFailed, to_json
from services.console.sessions import Session

KEEPALIVE_S = 15.0
"""A comment line this often, so proxies do not close a quiet stream."""
QUEUE_EVENTS = 256
"""Events buffered for a slow page; past it the watch waits (gRPC flow control)."""


async def run_events(request: Request, console: Console, session: Session) -> Response:
    after = request.query_params.get("after_seq", "0")
    if not after.isdigit():
        return error(400, "INVALID_ARGUMENT", "after_seq: must be a non-negative integer")
    watch = history_pb2.WatchRunRequest(
        project_id=session.project_id,
        run_id=params.path_id(request, "run_id"),
        after_seq=int(after),
        # The run page asks for the whole tree's events in this one stream (the history
        # service checks every descendant is the project's): children show as they step.
        include_descendants=params.flag(request, "descendants", False),
    )
    return _stream(console, session, console.backend.history.WatchRun, watch)


async def graph_events(request: Request, console: Console, session: Session) -> Response:
    watch = dispatcher_pb2.WatchTaskGraphRequest(
        project_id=session.project_id, task_graph_id=params.path_id(request, "graph_id")
    )
    return _stream(console, session, console.backend.dispatcher.WatchTaskGraph, watch)


def _stream(console: Console, session: Session, method: Any, watch: Any) -> Response:
    if session.open_streams >= console.settings.max_streams_per_session:
        return error(429, "RESOURCE_EXHAUSTED", "too many live views open: close one")
    return StreamingResponse(
        _events(console, session, method, watch),
        media_type="text/event-stream",
        headers={"cache-control": "no-store", "x-accel-buffering": "no"},
    )


async def _events(
    console: Console, session: Session, method: Any, watch: Any
) -> AsyncIterator[str]:
    queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue(QUEUE_EVENTS)

    async def pump() -> None:
        try:
            async for event in console.backend.stream(method, watch, session.token):
                await queue.put(("event", to_json(event)))
            await queue.put(("end", {}))
        except CallFailed as exc:
            await queue.put(("failed", {"code": exc.code, "message": exc.message}))

    # Counted here, where the finally below is sure to run for it.
    session.open_streams += 1
    task = asyncio.create_task(pump())
    try:
        yield ": connected\n\n"
        while True:
            try:
                kind, data = await asyncio.wait_for(queue.get(), KEEPALIVE_S)
            except TimeoutError:
                kind, data = "", None
            if console.sessions.get(session.id) is not session:
                yield "event: end\ndata: {}\n\n"  # signed out: the watch ends with the session
                return
            if kind == "":
                yield ": keep-alive\n\n"
                continue
            name = "message" if kind == "event" else kind
            yield f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"
            if kind != "event":
                return
    finally:
        session.open_streams -= 1
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
