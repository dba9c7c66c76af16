"""The console's JSON API: each route is one or a few gRPC calls made with the session's
token and project, answered as proto3 JSON (:func:`services.console.backend.to_json`)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from google.protobuf.duration_pb2 import Duration
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from agentfleet.v1 import (
    common_pb2,
    executor_pb2,
    history_pb2,
    registry_pb2,
    toolpool_pb2,
)
from services.console import params
from services.console.api_graphs import graph_routes
from services.console.app import BadRequest, Console, authed, read_json, relayed, text_field
from services.console.backend import CallFailed, to_json
from services.console.sessions import Session
from services.console.streams import run_events

MAX_INPUT_CHARS = 100_000
MAX_REASON_CHARS = 2_000
MAX_STATS_DAYS = 14
MAX_LABELS = 20
APPROVAL_RUNS = 100
"""Waiting runs the inbox reads at once (each costs a call)."""
APPROVAL_CALLS = 50
"""Waiting calls the inbox shows at once (each costs a GetRunToolCall); it says when more
wait, and a decided one makes room."""


async def list_runs(request: Request, console: Console, session: Session) -> Response:
    query = history_pb2.ListRunsRequest(
        project_id=session.project_id,
        page_size=params.page_size(request),
        page_token=params.text(request, "page_token", 1000),
        agent_name=params.text(request, "agent"),
        statuses=params.run_statuses(request),
        top_level_only=params.flag(request, "top_level", True),
        task_id=params.text(request, "task_id"),
        thread_id=params.text(request, "thread_id"),
        labels=params.labels(request),
        # The history service checks the value (rpc, trigger, schedule, ...) and names it.
        started_by=params.text(request, "started_by", 40),
    )
    for name, field in (("after", "created_after"), ("before", "created_before")):
        stamp = params.timestamp(request, name)
        if stamp is not None:
            getattr(query, field).CopyFrom(stamp)
    reply = await console.backend.call(console.backend.history.ListRuns, query, session.token)
    return JSONResponse(to_json(reply))


async def get_run(request: Request, console: Console, session: Session) -> Response:
    return await relayed(
        console,
        console.backend.history.GetRun,
        history_pb2.GetRunRequest(
            project_id=session.project_id, run_id=params.path_id(request, "run_id")
        ),
        session,
    )


async def run_tree(request: Request, console: Console, session: Session) -> Response:
    return await relayed(
        console,
        console.backend.history.GetRunTree,
        history_pb2.GetRunTreeRequest(
            project_id=session.project_id, run_id=params.path_id(request, "run_id")
        ),
        session,
    )


async def run_messages(request: Request, console: Console, session: Session) -> Response:
    return await relayed(
        console,
        console.backend.history.ListRunMessages,
        history_pb2.ListRunMessagesRequest(
            project_id=session.project_id,
            run_id=params.path_id(request, "run_id"),
            page_size=params.page_size(request, 100, 500),
            page_token=params.text(request, "page_token", 1000),
            preview_chars=200,
        ),
        session,
    )


async def run_message(request: Request, console: Console, session: Session) -> Response:
    return await relayed(
        console,
        console.backend.history.GetRunMessage,
        history_pb2.GetRunMessageRequest(
            project_id=session.project_id,
            run_id=params.path_id(request, "run_id"),
            message_id=params.path_id(request, "message_id"),
        ),
        session,
    )


async def run_calls(request: Request, console: Console, session: Session) -> Response:
    return await relayed(
        console,
        console.backend.history.ListRunToolCalls,
        history_pb2.ListRunToolCallsRequest(
            project_id=session.project_id,
            run_id=params.path_id(request, "run_id"),
            page_size=params.page_size(request, 100, 500),
            page_token=params.text(request, "page_token", 1000),
        ),
        session,
    )


async def run_call(request: Request, console: Console, session: Session) -> Response:
    return await relayed(
        console,
        console.backend.history.GetRunToolCall,
        history_pb2.GetRunToolCallRequest(
            project_id=session.project_id,
            run_id=params.path_id(request, "run_id"),
            tool_call_id=params.path_id(request, "call_id"),
        ),
        session,
    )


def run_labels(body: dict[str, object]) -> dict[str, str]:
    """StartRunRequest.labels from the body (the executor checks their number and size)."""
    labels = body.get("labels") or {}
    if not isinstance(labels, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        raise BadRequest("labels", "must be an object of strings")
    if len(labels) > MAX_LABELS:
        raise BadRequest("labels", f"at most {MAX_LABELS}")
    return labels


async def start_run(request: Request, console: Console, session: Session) -> Response:
    body = await read_json(request)
    reply = await console.backend.call(
        console.backend.executor.TriggerRun,
        executor_pb2.StartRunRequest(
            project_id=session.project_id,
            agent_name=text_field(body, "agent_name", limit=200),
            input=text_field(body, "input", limit=MAX_INPUT_CHARS),
            labels=run_labels(body),
            # The page makes one per form it shows: a double click starts one run.
            request_id=text_field(body, "request_id", limit=100, required=False)
            or str(uuid.uuid4()),
        ),
        session.token,
    )
    return JSONResponse({"run": to_json(reply)})


async def cancel_run(request: Request, console: Console, session: Session) -> Response:
    body = await read_json(request)
    return await relayed(
        console,
        console.backend.executor.CancelRun,
        executor_pb2.CancelRunRequest(
            project_id=session.project_id,
            run_id=params.path_id(request, "run_id"),
            reason=text_field(body, "reason", limit=MAX_REASON_CHARS, required=False)
            or "cancelled from the console",
        ),
        session,
    )


async def resume_run(request: Request, console: Console, session: Session) -> Response:
    body = await read_json(request)
    stream = console.backend.stream(
        console.backend.executor.ResumeRun,
        executor_pb2.ResumeRunRequest(
            project_id=session.project_id,
            run_id=params.path_id(request, "run_id"),
            input=text_field(body, "input", limit=MAX_INPUT_CHARS, required=False),
            request_id=text_field(body, "request_id", limit=100, required=False)
            or str(uuid.uuid4()),
        ),
        session.token,
    )
    # ResumeRun streams the run's events; its first one says the resume took. The page
    # follows the run through WatchRun, so the stream is closed after that.
    async for event in stream:
        await stream.aclose()
        return JSONResponse({"resumed": True, "event": to_json(event)})
    return JSONResponse({"resumed": True})


async def approvals(request: Request, console: Console, session: Session) -> Response:
    backend = console.backend
    runs = await backend.call(
        backend.history.ListRuns,
        history_pb2.ListRunsRequest(
            project_id=session.project_id,
            page_size=APPROVAL_RUNS,
            statuses=[common_pb2.RUN_STATUS_WAITING],
            include_internal_agents=True,
        ),
        session.token,
    )
    waiting: list[dict[str, object]] = []
    more = False
    for run in runs.runs:
        if len(waiting) >= APPROVAL_CALLS:
            more = True
            break
        calls = await backend.call(
            backend.history.ListRunToolCalls,
            history_pb2.ListRunToolCallsRequest(
                project_id=session.project_id,
                run_id=run.id,
                page_size=100,
                statuses=[common_pb2.TOOL_CALL_STATUS_AWAITING_APPROVAL],
            ),
            session.token,
        )
        for summary in calls.tool_calls:
            if len(waiting) >= APPROVAL_CALLS:
                more = True
                break
            # In full: what a person approves must be seen whole.
            call = await backend.call(
                backend.history.GetRunToolCall,
                history_pb2.GetRunToolCallRequest(
                    project_id=session.project_id,
                    run_id=run.id,
                    tool_call_id=summary.tool_call_id,
                ),
                session.token,
            )
            waiting.append({"run": to_json(run), "tool_call": to_json(call.tool_call)})
    more = more or bool(runs.next_page_token)
    return JSONResponse({"waiting": waiting, "more": more})


async def decide(request: Request, console: Console, session: Session) -> Response:
    body = await read_json(request)
    decision = body.get("decision")
    if decision not in ("approve", "reject"):
        raise BadRequest("decision", "must be approve or reject")
    reason = text_field(body, "reason", limit=MAX_REASON_CHARS, required=decision == "reject")
    return await relayed(
        console,
        console.backend.executor.DecideToolCall,
        executor_pb2.DecideToolCallRequest(
            project_id=session.project_id,
            run_id=params.path_id(request, "run_id"),
            tool_call_id=params.path_id(request, "call_id"),
            decision=executor_pb2.TOOL_CALL_DECISION_APPROVE
            if decision == "approve"
            else executor_pb2.TOOL_CALL_DECISION_REJECT,
            reason=reason,
            request_id=text_field(body, "request_id", limit=100, required=False)
            or str(uuid.uuid4()),
        ),
        session,
    )


async def catalog(request: Request, console: Console, session: Session) -> Response:
    """Agents, products, tools, MCP servers and secrets (names only: ListSecrets returns no
    values) on one page; a list the token may not read says so in its place."""
    backend = console.backend
    project = session.project_id
    reads = {
        "agents": (backend.registry.ListAgentDefinitions, registry_pb2.ListAgentDefinitionsRequest),
        "products": (backend.registry.ListProducts, registry_pb2.ListProductsRequest),
        "tools": (backend.toolpool.ListTools, toolpool_pb2.ListToolsRequest),
        "mcp_servers": (backend.toolpool.ListMcpServers, toolpool_pb2.ListMcpServersRequest),
        "secrets": (backend.toolpool.ListSecrets, toolpool_pb2.ListSecretsRequest),
    }
    result: dict[str, object] = {}
    for name, (method, request_type) in reads.items():
        try:
            reply = await backend.call(
                method, request_type(project_id=project, page_size=200), session.token
            )
            result[name] = to_json(reply)
        except CallFailed as exc:
            if exc.code == "UNAUTHENTICATED":
                raise
            result[name] = {"error": {"code": exc.code, "message": exc.message}}
    return JSONResponse(result)


async def stats(request: Request, console: Console, session: Session) -> Response:
    """Per agent over the window, and per day (one GetAgentStats of one day each: the RPC
    has no series), at most :data:`MAX_STATS_DAYS` days."""
    raw = request.query_params.get("days", "7")
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_STATS_DAYS:
        raise BadRequest("days", f"must be an integer from 1 to {MAX_STATS_DAYS}")
    days = int(raw)
    backend = console.backend
    tomorrow = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    tomorrow += timedelta(days=1)

    async def window(end: datetime, length_days: int) -> list[dict[str, object]]:
        query = history_pb2.GetAgentStatsRequest(
            project_id=session.project_id, window=Duration(seconds=length_days * 86400)
        )
        query.end_time.FromDatetime(end)
        reply = await backend.call(backend.history.GetAgentStats, query, session.token)
        return to_json(reply)["stats"]

    per_day = []
    for back in range(days - 1, -1, -1):
        end = tomorrow - timedelta(days=back)
        day = (end - timedelta(days=1)).date().isoformat()
        per_day.append({"day": day, "stats": await window(end, 1)})
    return JSONResponse({"stats": await window(tomorrow, days), "days": per_day})


def api_routes() -> list[Route]:
    return [
        Route("/api/runs", authed(list_runs), methods=["GET"]),
        Route("/api/runs", authed(start_run), methods=["POST"]),
        Route("/api/runs/{run_id}", authed(get_run), methods=["GET"]),
        Route("/api/runs/{run_id}/tree", authed(run_tree), methods=["GET"]),
        Route("/api/runs/{run_id}/events", authed(run_events), methods=["GET"]),
        Route("/api/runs/{run_id}/messages", authed(run_messages), methods=["GET"]),
        Route("/api/runs/{run_id}/messages/{message_id}", authed(run_message), methods=["GET"]),
        Route("/api/runs/{run_id}/calls", authed(run_calls), methods=["GET"]),
        Route("/api/runs/{run_id}/calls/{call_id}", authed(run_call), methods=["GET"]),
        Route("/api/runs/{run_id}/calls/{call_id}/decision", authed(decide), methods=["POST"]),
        Route("/api/runs/{run_id}/cancel", authed(cancel_run), methods=["POST"]),
        Route("/api/runs/{run_id}/resume", authed(resume_run), methods=["POST"]),
        Route("/api/approvals", authed(approvals), methods=["GET"]),
        *graph_routes(),
        Route("/api/catalog", authed(catalog), methods=["GET"]),
        Route("/api/stats", authed(stats), methods=["GET"]),
    ]
