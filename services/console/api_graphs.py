"""The console's task-graph routes: list, read, watch (:mod:`services.console.streams`),
their sessions, and a new graph from a DAG file's text (:mod:`agentfleet.dagfile`, the
parser ``agentfleet dag submit`` uses)."""

from __future__ import annotations

import uuid

import yaml
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from agentfleet import dagfile
from agentfleet.errors import InvalidArgument
from agentfleet.v1 import dispatcher_pb2
from services.console import params
from services.console.app import BadRequest, Console, authed, read_json, relayed, text_field
from services.console.backend import to_json
from services.console.sessions import Session
from services.console.streams import graph_events

MAX_DAG_CHARS = 512 * 1024


async def list_graphs(request: Request, console: Console, session: Session) -> Response:
    return await relayed(
        console,
        console.backend.dispatcher.ListTaskGraphs,
        dispatcher_pb2.ListTaskGraphsRequest(
            project_id=session.project_id,
            page_size=params.page_size(request),
            page_token=params.text(request, "page_token", 1000),
        ),
        session,
    )


async def get_graph(request: Request, console: Console, session: Session) -> Response:
    return await relayed(
        console,
        console.backend.dispatcher.GetTaskGraph,
        dispatcher_pb2.GetTaskGraphRequest(
            project_id=session.project_id, task_graph_id=params.path_id(request, "graph_id")
        ),
        session,
    )


async def graph_sessions(request: Request, console: Console, session: Session) -> Response:
    return await relayed(
        console,
        console.backend.dispatcher.ListTaskSessions,
        dispatcher_pb2.ListTaskSessionsRequest(
            project_id=session.project_id,
            task_id=params.text(request, "task_id"),
            page_size=params.page_size(request, 100, 500),
            page_token=params.text(request, "page_token", 1000),
        ),
        session,
    )


async def create_graph(request: Request, console: Console, session: Session) -> Response:
    body = await read_json(request)
    text = text_field(body, "dag", limit=MAX_DAG_CHARS)
    try:
        # safe_load: a DAG file is data (no tags that build objects); aliases are shared
        # references, so a small file cannot expand into a large graph here.
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise BadRequest("dag", f"is not valid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(document, dict):
        raise BadRequest("dag", "must hold a mapping (title, tasks, edges)")
    try:
        graph = dagfile.graph_request(document, project_id=session.project_id)
    except InvalidArgument as exc:
        raise BadRequest("dag", exc.message) from None
    graph.request_id = text_field(body, "request_id", limit=100, required=False) or str(
        uuid.uuid4()
    )
    reply = await console.backend.call(
        console.backend.dispatcher.CreateTaskGraph, graph, session.token
    )
    return JSONResponse(to_json(reply))


def graph_routes() -> list[Route]:
    return [
        Route("/api/graphs", authed(list_graphs), methods=["GET"]),
        Route("/api/graphs", authed(create_graph), methods=["POST"]),
        Route("/api/graphs/{graph_id}", authed(get_graph), methods=["GET"]),
        Route("/api/graphs/{graph_id}/events", authed(graph_events), methods=["GET"]),
        Route("/api/graphs/{graph_id}/sessions", authed(graph_sessions), methods=["GET"]),
    ]
