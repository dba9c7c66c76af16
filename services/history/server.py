"""HistoryService: protobuf <-> domain for run history, trees, stats and WatchRun.

Requests are validated here (bad ids are INVALID_ARGUMENT naming the field); everything
else is the repository (:mod:`services.history.queries`), the converters
(:mod:`services.history.convert`) and the process's run watcher (:mod:`agentfleet.run_watch`,
shared with the executor's StartRun). A run of
another project is NOT_FOUND, exactly like a run that does not exist.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc

from agentfleet import events as ev
from agentfleet import metrics
from agentfleet.db import Listener
from agentfleet.errors import InvalidArgument, NotFound, Unimplemented
from agentfleet.grpc_server import Registration
from agentfleet.pagination import clamp_page_size, decode_page_token, encode_page_token, page_of
from agentfleet.run_watch import RunWatch
from agentfleet.service_runtime import ServiceContext, ServiceParts
from agentfleet.v1 import common_pb2, history_pb2, history_pb2_grpc
from services.history import convert
from services.history.models import RunFilters
from services.history.queries import PREVIEW_CHARS, HistoryQueries
from services.history.tree import depth_first

CHILDREN_LIMIT = 500
MAX_PREVIEW_CHARS = 2000
DEFAULT_STATS_WINDOW = timedelta(hours=24)
MAX_STATS_WINDOW = timedelta(days=90)


def _uuid(value: str, field: str, *, required: bool = True) -> str | None:
    if not value:
        if required:
            raise InvalidArgument.for_field(field, "is required")
        return None
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise InvalidArgument.for_field(field, f"is not a UUID: {value[:80]!r}") from None


def _enum_names(enum: Any, prefix: str, values: Iterable[int], field: str) -> tuple[str, ...]:
    """Enum values -> stored names; UNSPECIFIED becomes a name that matches nothing."""
    names = []
    for value in values:
        try:
            names.append(enum.Name(value).removeprefix(prefix).lower())
        except ValueError:
            raise InvalidArgument.for_field(field, f"unknown value {value}") from None
    return tuple(sorted(set(names)))


def _child_time(request: Any, field: str) -> datetime | None:
    return getattr(request, field).ToDatetime(tzinfo=UTC) if request.HasField(field) else None


class HistoryServicer(history_pb2_grpc.HistoryServiceServicer):
    """Thin RPC layer over the history repository and the event watcher."""

    def __init__(self, queries: HistoryQueries, watch: RunWatch) -> None:
        self._queries = queries
        self._watch = watch

    async def ListRuns(
        self, request: history_pb2.ListRunsRequest, context: grpc.aio.ServicerContext
    ) -> history_pb2.ListRunsResponse:
        page_size = clamp_page_size(request.page_size)
        filters = RunFilters(
            project_id=request.project_id,
            agent_name=request.agent_name or None,
            statuses=_enum_names(common_pb2.RunStatus, "RUN_STATUS_", request.statuses, "statuses"),
            parent_run_id=_uuid(request.parent_run_id, "parent_run_id", required=False),
            root_run_id=_uuid(request.root_run_id, "root_run_id", required=False),
            top_level_only=request.top_level_only,
            created_after=_child_time(request, "created_after"),
            created_before=_child_time(request, "created_before"),
            include_internal_agents=request.include_internal_agents,
            task_id=_uuid(request.task_id, "task_id", required=False),
            thread_id=request.thread_id or None,
        )
        digest = filters.digest_fields()
        after = decode_page_token(request.page_token, digest, arity=2)
        rows = await self._queries.list_runs(filters, after=after, limit=page_size + 1)
        page, more = page_of(rows, page_size)
        token = encode_page_token([page[-1].created_at, str(page[-1].id)], digest) if more else ""
        return history_pb2.ListRunsResponse(
            runs=[convert.run_summary(r) for r in page], next_page_token=token
        )

    async def GetRun(
        self, request: history_pb2.GetRunRequest, context: grpc.aio.ServicerContext
    ) -> history_pb2.GetRunResponse:
        project_id = request.project_id
        run_id = _uuid(request.run_id, "run_id")
        assert run_id is not None
        row = await self._queries.get_run(project_id, run_id)
        if row is None:
            raise NotFound(f"run {run_id} not found")
        response = history_pb2.GetRunResponse(
            run=ev.agent_run_to_proto(row),
            agent=convert.agent_summary(
                row["agent_name"], await self._queries.agent_info(project_id, row["agent_name"])
            ),
            children=[
                convert.run_summary(c)
                for c in await self._queries.children(project_id, run_id, limit=CHILDREN_LIMIT)
            ],
        )
        if row["parent_run_id"] is not None:
            parent = await self._queries.run_overview(project_id, str(row["parent_run_id"]))
            if parent is not None:
                response.parent.CopyFrom(convert.run_summary(parent))
        counts = await self._queries.run_counts(run_id)
        response.message_count = counts.message_count
        response.tool_call_count = counts.tool_call_count
        response.last_event_seq = counts.last_event_seq
        return response

    async def _require_run(self, project_id: str, run_id_text: str) -> str:
        run_id = _uuid(run_id_text, "run_id")
        assert run_id is not None
        if not await self._queries.run_exists(project_id, run_id):
            raise NotFound(f"run {run_id} not found")
        return run_id

    async def ListRunMessages(
        self, request: history_pb2.ListRunMessagesRequest, context: grpc.aio.ServicerContext
    ) -> history_pb2.ListRunMessagesResponse:
        page_size = clamp_page_size(request.page_size)
        if request.preview_chars < 0:
            raise InvalidArgument.for_field("preview_chars", "must not be negative")
        preview_chars = min(request.preview_chars or PREVIEW_CHARS, MAX_PREVIEW_CHARS)
        roles = _enum_names(common_pb2.MessageRole, "MESSAGE_ROLE_", request.roles, "roles")
        run_id = await self._require_run(request.project_id, request.run_id)
        digest = {
            "project_id": request.project_id,
            "run_id": run_id,
            "roles": roles,
            "include_internal": request.include_internal,
        }
        after = decode_page_token(request.page_token, digest, arity=1)
        rows = await self._queries.list_messages(
            request.project_id,
            run_id,
            roles=roles,
            include_internal=request.include_internal,
            after_seq=None if after is None else int(after[0]),
            limit=page_size + 1,
        )
        page, more = page_of(rows, page_size)
        return history_pb2.ListRunMessagesResponse(
            messages=[convert.message_summary(m, preview_chars=preview_chars) for m in page],
            next_page_token=encode_page_token([page[-1].seq], digest) if more else "",
        )

    async def GetRunMessage(
        self, request: history_pb2.GetRunMessageRequest, context: grpc.aio.ServicerContext
    ) -> history_pb2.GetRunMessageResponse:
        run_id = _uuid(request.run_id, "run_id")
        message_id = _uuid(request.message_id, "message_id")
        assert run_id is not None
        assert message_id is not None
        row = await self._queries.get_message(request.project_id, run_id, message_id)
        if row is None:
            raise NotFound(f"message {message_id} of run {run_id} not found")
        return history_pb2.GetRunMessageResponse(message=convert.run_message(row))

    async def ListRunToolCalls(
        self, request: history_pb2.ListRunToolCallsRequest, context: grpc.aio.ServicerContext
    ) -> history_pb2.ListRunToolCallsResponse:
        page_size = clamp_page_size(request.page_size)
        statuses = _enum_names(
            common_pb2.ToolCallStatus, "TOOL_CALL_STATUS_", request.statuses, "statuses"
        )
        run_id = await self._require_run(request.project_id, request.run_id)
        digest = {
            "project_id": request.project_id,
            "run_id": run_id,
            "tool_name": request.tool_name,
            "statuses": statuses,
        }
        after = decode_page_token(request.page_token, digest, arity=2)
        rows = await self._queries.list_tool_calls(
            request.project_id,
            run_id,
            tool_name=request.tool_name or None,
            statuses=statuses,
            after=after,
            limit=page_size + 1,
        )
        page, more = page_of(rows, page_size)
        token = encode_page_token([page[-1].created_at, str(page[-1].id)], digest) if more else ""
        return history_pb2.ListRunToolCallsResponse(
            tool_calls=[convert.tool_call_summary(t) for t in page], next_page_token=token
        )

    async def GetRunToolCall(
        self, request: history_pb2.GetRunToolCallRequest, context: grpc.aio.ServicerContext
    ) -> history_pb2.GetRunToolCallResponse:
        run_id = _uuid(request.run_id, "run_id")
        assert run_id is not None
        if not request.tool_call_id:
            raise InvalidArgument.for_field("tool_call_id", "is required")
        row = await self._queries.get_tool_call(request.project_id, run_id, request.tool_call_id)
        if row is None:
            raise NotFound(f"tool call {request.tool_call_id!r} of run {run_id} not found")
        return history_pb2.GetRunToolCallResponse(tool_call=convert.tool_call(row))

    async def WatchRun(
        self, request: history_pb2.WatchRunRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[common_pb2.RunEvent]:
        run_id = _uuid(request.run_id, "run_id")
        assert run_id is not None
        if request.after_seq < 0:
            raise InvalidArgument.for_field("after_seq", "must not be negative")
        if request.include_descendants or request.descendant_after_seq:
            raise Unimplemented("WatchRun: include_descendants is not supported yet")
        with metrics.watch_subscriber():
            async for event in self._watch.events(
                project_id=request.project_id,
                run_id=run_id,
                after_seq=request.after_seq,
                include_internal=request.include_internal,
            ):
                yield event

    async def GetRunTree(
        self, request: history_pb2.GetRunTreeRequest, context: grpc.aio.ServicerContext
    ) -> history_pb2.GetRunTreeResponse:
        run_id = _uuid(request.run_id, "run_id")
        assert run_id is not None
        rows = depth_first(await self._queries.tree(request.project_id, run_id))
        if not rows:
            raise NotFound(f"run {run_id} not found")
        root = rows[0]
        return history_pb2.GetRunTreeResponse(
            root_run_id=str(root.id),
            nodes=[convert.tree_node(r) for r in rows],
            tokens_total=root.tokens_total_tree,
        )

    async def GetAgentStats(
        self, request: history_pb2.GetAgentStatsRequest, context: grpc.aio.ServicerContext
    ) -> history_pb2.GetAgentStatsResponse:
        window = (
            request.window.ToTimedelta() if request.HasField("window") else DEFAULT_STATS_WINDOW
        )
        if window <= timedelta(0):
            raise InvalidArgument.for_field("window", "must be positive")
        if window > MAX_STATS_WINDOW:
            raise InvalidArgument.for_field("window", "must be at most 90 days")
        end = _child_time(request, "end_time") or datetime.now(UTC)
        if end - datetime.min.replace(tzinfo=UTC) < window:
            raise InvalidArgument.for_field("end_time", "leaves no room for the window")
        start = end - window
        rows = await self._queries.agent_stats(
            request.project_id,
            agent_name=request.agent_name or None,
            start=start,
            end=end,
            include_internal_agents=request.include_internal_agents,
        )
        return history_pb2.GetAgentStatsResponse(
            stats=[convert.agent_stats(r, start=start, end=end) for r in rows]
        )


async def build(context: ServiceContext) -> ServiceParts:
    """The history service: its servicer, the shared event listener loop, and its cleanup."""
    listener = Listener(context.database_url)
    watch = RunWatch(pool=context.pool, listener=listener)
    servicer = HistoryServicer(HistoryQueries(context.pool), watch)

    async def listen(stopping: asyncio.Event) -> None:
        # Until the service stops (the Listener reconnects itself); WatchRun waits for it.
        await listener.start()
        await watch.start()
        await stopping.wait()

    async def stop() -> None:
        await listener.close()
        await watch.close()

    return ServiceParts(
        registrations=[Registration.of(history_pb2, history_pb2_grpc, "HistoryService", servicer)],
        background=[listen],
        on_stop=[stop],
    )
