"""HistoryService: protobuf <-> domain for run history, trees, stats and WatchRun.

Requests are validated here (bad ids are INVALID_ARGUMENT naming the field); everything
else is the repository (:mod:`services.history.queries`), the converters
(:mod:`services.history.convert`) and the process's run watcher (:mod:`agentfleet.runs.run_watch`,
shared with the executor's StartRun). A run of
another project is NOT_FOUND, exactly like a run that does not exist.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import grpc

from agentfleet import events as ev
from agentfleet.auth import current_principal
from agentfleet.errors import InvalidArgument, NotFound, PermissionDenied
from agentfleet.events.visibility import INTERNAL_TOOLS
from agentfleet.observability import metrics
from agentfleet.postgres.db import Listener
from agentfleet.postgres.pagination import (
    clamp_page_size,
    decode_page_token,
    encode_page_token,
    page_of,
)
from agentfleet.process.service_runtime import ServiceContext, ServiceParts
from agentfleet.rpc.grpc_server import Registration
from agentfleet.runs.run_watch import RunWatch
from agentfleet.v1 import common_pb2, history_pb2, history_pb2_grpc
from services.history import convert
from services.history.latency import agent_latency
from services.history.models import RunFilters
from services.history.queries import PREVIEW_CHARS, TREE_LIMIT, HistoryQueries
from services.history.retention import DEFAULT_CALL_ROOTS, MAX_CALL_ROOTS, HistoryRetention
from services.history.tree import depth_first, descendants
from services.history.tree_watch import watch_tree

CHILDREN_LIMIT = 500
MAX_PREVIEW_CHARS = 2000
DEFAULT_STATS_WINDOW = timedelta(hours=24)
MAX_STATS_WINDOW = timedelta(days=90)
MAX_SEQ = 2**31 - 1
"""Largest event seq: seqs are integer (int32) columns, so a larger after_seq cannot even be
sent as a query argument (the proto field is int64)."""

_Row = TypeVar("_Row")


def _uuid(value: str, field: str, *, required: bool = True) -> str | None:
    if not value:
        if required:
            raise InvalidArgument.for_field(field, "is required")
        return None
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise InvalidArgument.for_field(field, f"is not a UUID: {value[:80]!r}") from None


def _descendant_after_seqs(request: history_pb2.WatchRunRequest) -> dict[str, int]:
    """``descendant_after_seq`` with canonical run ids; INVALID_ARGUMENT naming a bad entry,
    or the map when it comes without ``include_descendants`` or holds more runs than a tree
    can (its size is the client's to choose)."""
    given = request.descendant_after_seq
    if not given:
        return {}
    if not request.include_descendants:
        raise InvalidArgument.for_field(
            "descendant_after_seq", "needs include_descendants (after_seq is the run's own)"
        )
    if len(given) > TREE_LIMIT:
        raise InvalidArgument.for_field(
            "descendant_after_seq", f"names more than {TREE_LIMIT} runs, the most a tree holds"
        )
    seqs: dict[str, int] = {}
    for key, seq in given.items():
        field = f"descendant_after_seq[{key[:80]!r}]"
        run_id = _uuid(key, field)
        assert run_id is not None
        if not 0 <= seq <= MAX_SEQ:
            raise InvalidArgument.for_field(field, f"must be 0 to {MAX_SEQ}")
        seqs[run_id] = seq
    return seqs


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


def _newest_first(row: Any) -> list[Any]:
    """The keyset position of a row of a listing ordered by (created_at, id)."""
    return [row.created_at, str(row.id)]


NEWEST_FIRST_KINDS = (datetime, uuid.UUID)
"""What each value of a :func:`_newest_first` position is."""


async def _page(
    token: str,
    digest: Mapping[str, Any],
    page_size: int,
    read: Callable[[list[Any] | None, int], Awaitable[Sequence[_Row]]],
    *,
    position: Callable[[_Row], list[Any]] = _newest_first,
    kinds: Sequence[type] = NEWEST_FIRST_KINDS,
) -> tuple[Sequence[_Row], str]:
    """The page after ``token`` (issued for ``digest``), read by ``read(after, limit)`` with
    the keyset position to read after (None: the first page), and the token of the next page
    ("" after the last). ``page_size`` is clamped by the caller, before its other checks."""
    after = decode_page_token(token, digest, kinds=kinds)
    page, more = page_of(await read(after, page_size + 1), page_size)
    return page, encode_page_token(position(page[-1]), digest) if more else ""


MAX_LABEL_FILTERS = 10
MAX_LABEL_CHARS = 256


def _label_filter(labels: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """ListRunsRequest.labels, bounded (a tenant's filter is a query it pays for)."""
    if len(labels) > MAX_LABEL_FILTERS:
        raise InvalidArgument.for_field("labels", f"at most {MAX_LABEL_FILTERS} pairs")
    for key, value in labels.items():
        if not key or len(key) > MAX_LABEL_CHARS or len(value) > MAX_LABEL_CHARS:
            raise InvalidArgument.for_field(
                "labels", f"keys must be 1 to {MAX_LABEL_CHARS} characters, values at most that"
            )
    return tuple(sorted(labels.items()))


@dataclass(frozen=True, kw_only=True, slots=True)
class HistoryServicer(history_pb2_grpc.HistoryServiceServicer):
    """Thin RPC layer over the history repository and the event watcher."""

    queries: HistoryQueries
    watch: RunWatch
    retention: HistoryRetention

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
            started_by=_started_by(request.started_by),
            labels=_label_filter(request.labels),
        )
        page, token = await _page(
            request.page_token,
            filters.digest_fields(),
            page_size,
            lambda after, limit: self.queries.list_runs(filters, after=after, limit=limit),
        )
        return history_pb2.ListRunsResponse(
            runs=[convert.run_summary(r) for r in page], next_page_token=token
        )

    async def GetRun(
        self, request: history_pb2.GetRunRequest, context: grpc.aio.ServicerContext
    ) -> history_pb2.GetRunResponse:
        project_id = request.project_id
        run_id = _uuid(request.run_id, "run_id")
        assert run_id is not None
        row = await self.queries.get_run(project_id, run_id)
        if row is None:
            raise NotFound(f"run {run_id} not found")
        response = history_pb2.GetRunResponse(
            run=ev.agent_run_to_proto(row),
            agent=convert.agent_summary(
                row["agent_name"], await self.queries.agent_info(project_id, row["agent_name"])
            ),
            children=[
                convert.run_summary(c)
                for c in await self.queries.children(project_id, run_id, limit=CHILDREN_LIMIT)
            ],
        )
        if row["parent_run_id"] is not None:
            parent = await self.queries.run_overview(project_id, str(row["parent_run_id"]))
            if parent is not None:
                response.parent.CopyFrom(convert.run_summary(parent))
        counts = await self.queries.run_counts(run_id)
        response.message_count = counts.message_count
        response.tool_call_count = counts.tool_call_count
        response.last_event_seq = counts.last_event_seq
        return response

    async def _run_page(
        self,
        request: Any,
        page_size: int,
        filters: Mapping[str, Any],
        read: Callable[[str, list[Any] | None, int], Awaitable[Sequence[_Row]]],
        *,
        position: Callable[[_Row], list[Any]] = _newest_first,
        kinds: Sequence[type] = NEWEST_FIRST_KINDS,
    ) -> tuple[Sequence[_Row], str]:
        """A page of the records of the run ``request.run_id`` (NOT_FOUND unless it is one of
        ``request.project_id``), read by ``read(run_id, after, limit)``; the page token is
        bound to the run and ``filters``; ``position`` and ``kinds`` as for :func:`_page`."""
        run_id = _uuid(request.run_id, "run_id")
        assert run_id is not None
        if not await self.queries.run_exists(request.project_id, run_id):
            raise NotFound(f"run {run_id} not found")
        return await _page(
            request.page_token,
            {"project_id": request.project_id, "run_id": run_id, **filters},
            page_size,
            lambda after, limit: read(run_id, after, limit),
            position=position,
            kinds=kinds,
        )

    async def ListRunMessages(
        self, request: history_pb2.ListRunMessagesRequest, context: grpc.aio.ServicerContext
    ) -> history_pb2.ListRunMessagesResponse:
        page_size = clamp_page_size(request.page_size)
        if request.preview_chars < 0:
            raise InvalidArgument.for_field("preview_chars", "must not be negative")
        preview_chars = min(request.preview_chars or PREVIEW_CHARS, MAX_PREVIEW_CHARS)
        roles = _enum_names(common_pb2.MessageRole, "MESSAGE_ROLE_", request.roles, "roles")
        page, token = await self._run_page(
            request,
            page_size,
            {"roles": roles, "include_internal": request.include_internal},
            lambda run_id, after, limit: self.queries.list_messages(
                request.project_id,
                run_id,
                roles=roles,
                include_internal=request.include_internal,
                after_seq=None if after is None else after[0],
                limit=limit,
            ),
            position=lambda message: [message.seq],
            kinds=(int,),
        )
        return history_pb2.ListRunMessagesResponse(
            messages=[convert.message_summary(m, preview_chars=preview_chars) for m in page],
            next_page_token=token,
        )

    async def GetRunMessage(
        self, request: history_pb2.GetRunMessageRequest, context: grpc.aio.ServicerContext
    ) -> history_pb2.GetRunMessageResponse:
        run_id = _uuid(request.run_id, "run_id")
        message_id = _uuid(request.message_id, "message_id")
        assert run_id is not None
        assert message_id is not None
        row = await self.queries.get_message(request.project_id, run_id, message_id)
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
        page, token = await self._run_page(
            request,
            page_size,
            {
                "tool_name": request.tool_name,
                "statuses": statuses,
                "include_internal": request.include_internal,
            },
            lambda run_id, after, limit: self.queries.list_tool_calls(
                request.project_id,
                run_id,
                tool_name=request.tool_name or None,
                statuses=statuses,
                hidden_tools=() if request.include_internal else sorted(INTERNAL_TOOLS),
                after=after,
                limit=limit,
            ),
        )
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
        row = await self.queries.get_tool_call(request.project_id, run_id, request.tool_call_id)
        if row is None:
            raise NotFound(f"tool call {request.tool_call_id!r} of run {run_id} not found")
        return history_pb2.GetRunToolCallResponse(tool_call=convert.tool_call(row))

    async def WatchRun(
        self, request: history_pb2.WatchRunRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[common_pb2.RunEvent]:
        run_id = _uuid(request.run_id, "run_id")
        assert run_id is not None
        if not 0 <= request.after_seq <= MAX_SEQ:
            raise InvalidArgument.for_field("after_seq", f"must be 0 to {MAX_SEQ}")
        after_seqs = _descendant_after_seqs(request)
        if request.include_descendants:
            project_id = request.project_id

            async def subtree() -> list[str]:
                return descendants(await self.queries.tree(project_id, run_id), run_id)

            with metrics.watch_subscriber():
                async for event in watch_tree(
                    self.watch,
                    project_id=project_id,
                    run_id=run_id,
                    after_seq=request.after_seq,
                    after_seqs=after_seqs,
                    include_internal=request.include_internal,
                    subtree=subtree,
                ):
                    yield event
            return
        with metrics.watch_subscriber():
            async for event in self.watch.events(
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
        rows = depth_first(await self.queries.tree(request.project_id, run_id))
        if not rows:
            raise NotFound(f"run {run_id} not found")
        root = rows[0]
        return history_pb2.GetRunTreeResponse(
            root_run_id=str(root.id),
            nodes=[convert.tree_node(r) for r in rows],
            tokens_total=root.tokens_total_tree,
            cost_total_nanos=root.cost_total_tree_nanos,
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
        rows = await self.queries.agent_stats(
            request.project_id,
            agent_name=request.agent_name or None,
            start=start,
            end=end,
            include_internal_agents=request.include_internal_agents,
        )
        latency = await agent_latency(
            self.queries.pool,
            request.project_id,
            agent_name=request.agent_name or None,
            start=start,
            end=end,
            include_internal_agents=request.include_internal_agents,
        )
        return history_pb2.GetAgentStatsResponse(
            stats=[
                convert.agent_stats(r, start=start, end=end, latency=latency.get(r.agent_name))
                for r in rows
            ]
        )

    async def PruneHistory(
        self, request: history_pb2.PruneHistoryRequest, context: grpc.aio.ServicerContext
    ) -> history_pb2.PruneHistoryResponse:
        # A dry run only counts: any member may see what retention would take. Deleting is
        # the project's administrators' (the method is not admin-only for the dry run).
        if not request.dry_run and current_principal.get().role != "admin":
            raise PermissionDenied("PruneHistory without dry_run needs an admin token")
        if not 0 <= request.max_runs <= MAX_CALL_ROOTS:
            raise InvalidArgument.for_field(
                "max_runs", f"must be 0 (10,000) to {MAX_CALL_ROOTS}, not {request.max_runs}"
            )
        totals = await self.retention.prune(
            request.project_id,
            dry_run=request.dry_run,
            max_roots=request.max_runs or DEFAULT_CALL_ROOTS,
        )
        reply = history_pb2.PruneHistoryResponse(
            runs=totals.runs,
            messages=totals.messages,
            tool_calls=totals.tool_calls,
            events=totals.events,
            keep_days=totals.keep_days,
            more=totals.more,
            trigger_firings=totals.trigger_firings,
        )
        if totals.cutoff is not None:
            reply.cutoff.FromDatetime(totals.cutoff)
        return reply

    async def SetHistoryRetention(
        self, request: history_pb2.SetHistoryRetentionRequest, context: grpc.aio.ServicerContext
    ) -> history_pb2.SetHistoryRetentionResponse:
        days = request.keep_days if request.HasField("keep_days") else None
        keep_days, own = await self.retention.set_keep_days(request.project_id, days)
        return history_pb2.SetHistoryRetentionResponse(keep_days=keep_days, project_setting=own)


# Setting how long a project's history is kept is its administrators' decision.
HISTORY_ADMIN_METHODS = ("SetHistoryRetention",)


async def build(context: ServiceContext) -> ServiceParts:
    """The history service: its servicer, the shared event listener loop, and its cleanup."""
    listener = Listener(context.database_url)
    watch = RunWatch(pool=context.pool, listener=listener)
    retention = HistoryRetention(
        pool=context.pool,
        default_days=context.settings.history_retention_days,
        interval_s=context.settings.history_prune_interval_s,
        outbox_keep_hours=context.settings.trigger_outbox_retention_hours,
    )
    servicer = HistoryServicer(
        queries=HistoryQueries(context.pool), watch=watch, retention=retention
    )

    async def listen(stopping: asyncio.Event) -> None:
        # Until the service stops (the Listener reconnects itself); WatchRun waits for it.
        await listener.start()
        await watch.start()
        await stopping.wait()

    async def stop() -> None:
        await listener.close()
        await watch.close()

    return ServiceParts(
        registrations=[
            Registration.of(
                history_pb2,
                history_pb2_grpc,
                "HistoryService",
                servicer,
                admin_methods=HISTORY_ADMIN_METHODS,
            )
        ],
        background=[listen, retention.run],
        on_stop=[stop],
    )


STARTED_BY = ("rpc", "trigger", "schedule", "event", "parent", "task")
"""AgentRun.started_by's values (agent_runs.started_by, migration 0027)."""


def _started_by(value: str) -> str | None:
    if not value:
        return None
    if value not in STARTED_BY:
        raise InvalidArgument.for_field("started_by", f"must be one of {', '.join(STARTED_BY)}")
    return value
