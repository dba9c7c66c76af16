"""A small remote A2A agent written with the official ``a2a-sdk`` server classes, for tests of
remote children: served by uvicorn on 127.0.0.1 in the test's own event loop.

What it does follows the first word of the message it is sent:

* ``answer <text>``: a WORKING status saying "working on it", an artifact with ``<text>`` and
  a JSON data part ``{"echo": <text>}``, then COMPLETED;
* ``fail <text>``: FAILED, the status message ``<text>``;
* ``hang``: WORKING, then nothing until ``tasks/cancel`` (recorded in :attr:`cancelled`);
* ``ask``: INPUT_REQUIRED asking "which one?"; the next message on that task (same task id)
  completes it, its artifact ``you chose <that message's text>``; ``ask <n>`` adds ``n``
  characters to the question (a peer asking at length);
* ``quiet``: SUBMITTED, WORKING with no message at all (no text part), an artifact
  ``quietly done``, then COMPLETED;
* ``nag``: INPUT_REQUIRED "which one?" again after every answer, forever;
* ``flip <n>``: ``n`` status updates alternating SUBMITTED and WORKING with no text, then
  COMPLETED (a peer changing state without end);
* ``flood <n>``: ``n`` WORKING statuses of 10,000 characters each, then COMPLETED.

Every request's headers are kept (:attr:`seen_headers`, by path), and every message the agent
executes as (task id, context id, text) (:attr:`messages`). Besides the agent's card
(``/agent/.well-known/agent-card.json``) it serves a card whose endpoint is ``inward_url``
(``/inward/card.json``), a redirect to any URL (``/redirect?to=URL``), a redirect to itself
(``/loop``), a card too large (``/huge/card.json``) and a JSON page that is no card
(``/not-a-card.json``), for the SSRF and hostile-peer tests; and the agent on the HTTP+JSON
binding under ``/rest``, its card (offering only that binding) at ``/rest/card.json``.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import uvicorn
from a2a.helpers.proto_helpers import new_task, new_text_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes import (
    create_agent_card_routes,
    create_jsonrpc_routes,
    create_rest_routes,
)
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import a2a_pb2 as a2a
from google.protobuf import struct_pb2
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

CARD_PATH = "/agent/.well-known/agent-card.json"


class _Executor(AgentExecutor):
    def __init__(self, agent: RemoteAgentServer) -> None:
        self._agent = agent

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        text = context.get_user_input()
        task_id, context_id = context.task_id or "", context.context_id or ""
        self._agent.messages.append((task_id, context_id, text))
        current = context.current_task
        if current is None:
            await event_queue.enqueue_event(new_task(task_id, context_id, a2a.TASK_STATE_SUBMITTED))
        updater = TaskUpdater(event_queue, task_id, context_id)
        word, _, rest = text.partition(" ")
        asked = "which one?" + (" " + "q" * int(rest) if word == "ask" and rest.isdigit() else "")
        question = new_text_message(asked, context_id=context_id, task_id=task_id)
        if task_id in self._agent.nagging:
            await updater.requires_input(question)
            return
        if current is not None and current.status.state == a2a.TASK_STATE_INPUT_REQUIRED:
            # The answer to "which one?", sent on the same task.
            await updater.add_artifact([a2a.Part(text=f"you chose {text}")], name="answer")
            await updater.complete()
            return
        note = new_text_message("working on it", context_id=context_id, task_id=task_id)
        if word == "answer":
            await updater.update_status(a2a.TASK_STATE_WORKING, message=note)
            data = struct_pb2.Value()
            data.struct_value.update({"echo": rest})
            await updater.add_artifact(
                [a2a.Part(text=rest), a2a.Part(data=data, media_type="application/json")],
                name="answer",
            )
            await updater.complete()
        elif word == "fail":
            await updater.failed(new_text_message(rest, context_id=context_id, task_id=task_id))
        elif word == "flood":
            # A hostile peer: more progress than any run should keep, each piece too long.
            for i in range(int(rest or "250")):
                piece = new_text_message(
                    f"{i} " + "x" * 10_000, context_id=context_id, task_id=task_id
                )
                await updater.update_status(a2a.TASK_STATE_WORKING, message=piece)
            await updater.add_artifact([a2a.Part(text="flooded")], name="answer")
            await updater.complete()
        elif word == "huge":
            # A hostile peer: one status event far larger than any response should be.
            piece = new_text_message(
                "y" * (int(rest or "0") or 12_000_000), context_id=context_id, task_id=task_id
            )
            await updater.update_status(a2a.TASK_STATE_WORKING, message=piece)
            await updater.complete()
        elif word == "quiet":
            await updater.update_status(a2a.TASK_STATE_WORKING)  # a state change, no text
            await updater.add_artifact([a2a.Part(text="quietly done")], name="answer")
            await updater.complete()
        elif word == "flip":
            for i in range(int(rest or "300")):
                await updater.update_status(
                    a2a.TASK_STATE_WORKING if i % 2 else a2a.TASK_STATE_SUBMITTED
                )
            await updater.add_artifact([a2a.Part(text="flipped")], name="answer")
            await updater.complete()
        elif word == "nag":
            self._agent.nagging.add(task_id)
            await updater.requires_input(question)
        elif word == "hang":
            await updater.update_status(a2a.TASK_STATE_WORKING, message=note)
            self._agent.hanging.add(task_id)
            await asyncio.Event().wait()  # until tasks/cancel cancels this coroutine
        else:
            await updater.requires_input(question)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id = context.task_id or ""
        self._agent.cancelled.append(task_id)
        await TaskUpdater(event_queue, task_id, context.context_id or "").cancel()


@dataclass(kw_only=True)
class RemoteAgentServer:
    """The remote agent; :meth:`serve` starts it."""

    inward_url: str = "http://169.254.169.254/"
    """The endpoint the inward card names (a metadata address by default)."""
    port: int = 0
    seen_headers: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    cancelled: list[str] = field(default_factory=list)
    hanging: set[str] = field(default_factory=set)
    messages: list[tuple[str, str, str]] = field(default_factory=list)
    nagging: set[str] = field(default_factory=set)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def card_url(self) -> str:
        return self.base_url + CARD_PATH

    def card(self, url: str, binding: str = "JSONRPC") -> a2a.AgentCard:
        return a2a.AgentCard(
            name="remote-echo",
            description="Echoes what it is asked, written with the a2a-sdk.",
            version="1.0.0",
            supported_interfaces=[
                a2a.AgentInterface(url=url, protocol_binding=binding, protocol_version="1.0")
            ],
            capabilities=a2a.AgentCapabilities(streaming=True),
            default_input_modes=["text/plain"],
            default_output_modes=["text/plain", "application/json"],
            skills=[a2a.AgentSkill(id="echo", name="echo", description="echo", tags=["test"])],
        )

    def app(self) -> ASGIApp:
        card = self.card(f"{self.base_url}/agent/")
        handler = DefaultRequestHandler(
            agent_executor=_Executor(self), task_store=InMemoryTaskStore(), agent_card=card
        )

        async def redirect(request: Request) -> Response:
            return RedirectResponse(request.query_params["to"], status_code=302)

        async def loop(request: Request) -> Response:
            return RedirectResponse(f"{self.base_url}/loop", status_code=302)

        async def huge(request: Request) -> Response:
            card = agent_card_to_dict(self.card(f"{self.base_url}/agent/"))
            card["description"] = "y" * 300_000
            return JSONResponse(card)

        async def not_a_card(request: Request) -> Response:
            return JSONResponse({"hello": "world"})

        routes = Starlette(
            routes=[
                *create_agent_card_routes(card, card_url=CARD_PATH),
                *create_agent_card_routes(self.card(self.inward_url), card_url="/inward/card.json"),
                *create_jsonrpc_routes(handler, rpc_url="/agent/"),
                # The same agent on the HTTP+JSON binding, with a card offering only that.
                *create_agent_card_routes(
                    self.card(f"{self.base_url}/rest", binding="HTTP+JSON"),
                    card_url="/rest/card.json",
                ),
                Route("/redirect", redirect, methods=["GET"]),
                Route("/loop", loop, methods=["GET"]),
                Route("/huge/card.json", huge, methods=["GET"]),
                Route("/not-a-card.json", not_a_card, methods=["GET"]),
                # Last: the REST routes' patterns would take the paths above.
                *create_rest_routes(handler, path_prefix="/rest"),
            ]
        )

        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] == "http":
                headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
                self.seen_headers.setdefault(scope["path"], []).append(headers)
            await routes(scope, receive, send)

        return app

    @contextlib.asynccontextmanager
    async def serve(self) -> AsyncIterator[RemoteAgentServer]:
        """Serves on 127.0.0.1 (a free port) until the block ends."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        self.port = sock.getsockname()[1]
        server = uvicorn.Server(
            uvicorn.Config(self.app(), lifespan="off", log_config=None, access_log=False)
        )
        serving = asyncio.create_task(server.serve(sockets=[sock]))
        try:
            while not server.started:
                if serving.done():
                    serving.result()
                await asyncio.sleep(0.01)
            yield self
        finally:
            server.should_exit = True
            await serving
            sock.close()


async def _serve_forever(port: int) -> None:
    async with RemoteAgentServer(port=port).serve() as server:
        print(f"remote A2A agent: card at {server.card_url}", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    import sys

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve_forever(int(sys.argv[1]) if len(sys.argv) > 1 else 8300))
