"""DispatcherService: protobuf <-> domain for task DAGs, and the dispatcher process's parts
(the RPCs, the dispatch loop, one channel to the executor, one listener for watches)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import grpc

from agentfleet.errors import FieldViolation, InvalidArgument
from agentfleet.graph import canonical_id
from agentfleet.llm import GenaiModelClient
from agentfleet.llm.limiter.quota import ModelQuotas
from agentfleet.postgres.db import Listener
from agentfleet.process.service_runtime import ServiceContext, ServiceParts
from agentfleet.request_ids import checked_request_id
from agentfleet.rpc.clients import service_channel
from agentfleet.rpc.grpc_server import Registration
from agentfleet.structs import struct_dict
from agentfleet.timestamps import timestamp_proto
from agentfleet.v1 import dispatcher_pb2 as pb
from agentfleet.v1 import dispatcher_pb2_grpc
from services.dispatcher import operations
from services.dispatcher.evaluator import LlmEvaluator
from services.dispatcher.graphs.dag import DEFAULT_MAX_RETRIES, NewTask
from services.dispatcher.graphs.graph_reads import GraphReader, GraphView
from services.dispatcher.graphs.graph_writes import GraphStore
from services.dispatcher.loop import Dispatcher
from services.dispatcher.models import (
    GRAPH_STATUS,
    GRAPH_STATUS_NAMES,
    session_to_proto,
    task_to_proto,
)
from services.dispatcher.runs import GrpcRunControl, RunControl
from services.dispatcher.selector import LlmChooser, Selector
from services.dispatcher.timing import LoopTiming
from services.dispatcher.triage import LlmTriage
from services.dispatcher.watch import GraphWatcher

__all__ = ["DispatcherServicer", "build", "graph_to_proto", "new_tasks"]

DEFAULT_CANCEL_REASON = "task graph cancelled"

_GraphRequest = (
    pb.AddTasksRequest
    | pb.GetTaskGraphRequest
    | pb.CancelTaskGraphRequest
    | pb.WatchTaskGraphRequest
)


def new_tasks(specs: list[pb.TaskSpec]) -> list[NewTask]:
    """Request TaskSpecs as domain tasks (field checks happen in dag.validate_graph)."""
    return [
        NewTask(
            key=s.key,
            title=s.title,
            description=s.description,
            assigned_agent=s.assigned_agent.strip(),
            tags=list(s.tags),
            priority=s.priority,
            max_retries=s.max_retries if s.HasField("max_retries") else DEFAULT_MAX_RETRIES,
            max_resumes=s.max_resumes if s.HasField("max_resumes") else None,
            timeout_s=(s.timeout.seconds + s.timeout.nanos / 1e9)
            if s.HasField("timeout")
            else None,
            extra=struct_dict(s.properties) if s.HasField("properties") else {},
        )
        for s in specs
    ]


def _page(request: pb.ListTaskGraphsRequest | pb.ListTaskSessionsRequest) -> operations.PageRequest:
    """The page a List request asks for."""
    return operations.PageRequest(size=request.page_size, token=request.page_token)


def graph_to_proto(view: GraphView, *, with_tasks: bool) -> pb.TaskGraph:
    p = view.object.properties
    graph = pb.TaskGraph(
        id=view.object.id,
        project_id=view.object.project_id,
        title=str(p.get("title", "")),
        status=GRAPH_STATUS[view.status],
        counts=view.counts.to_proto(),
        max_parallel=int(p.get("max_parallel", 0)),
        labels={str(k): str(v) for k, v in (p.get("labels") or {}).items()},
        llm_triage=p.get("llm_triage") is True,
    )
    if with_tasks:
        graph.tasks.extend(task_to_proto(t) for t in view.tasks)
        graph.edges.extend(pb.TaskEdge(blocker_key=s, blocked_key=d) for s, d in view.edges)
    for name, value in (
        ("create_time", view.object.created_at),
        ("update_time", view.update_time),
        ("complete_time", view.complete_time),
    ):
        stamp = timestamp_proto(value)
        if stamp is not None:
            getattr(graph, name).CopyFrom(stamp)
    return graph


def _require(**fields: str) -> None:
    problems = [FieldViolation(name, "is required") for name, v in fields.items() if not v]
    if problems:
        raise InvalidArgument.for_fields(problems)


def _graph_id(request: _GraphRequest) -> str:
    """The request's project and task_graph_id required, the id canonical: tasks store it
    and every view, watch and cancellation compares it as text, so another spelling of the
    same UUID (uppercase, braces, urn:uuid:, no hyphens) found the graph but none of its
    tasks, and tasks added under it belonged to no graph yet were dispatched."""
    _require(project_id=request.project_id, task_graph_id=request.task_graph_id)
    return canonical_id(request.task_graph_id, "task_graph_id")


class DispatcherServicer(dispatcher_pb2_grpc.DispatcherServiceServicer):
    def __init__(self, *, pool: asyncpg.Pool, runs: RunControl, watcher: GraphWatcher) -> None:
        self._pool = pool
        self._store = GraphStore(pool)
        self._graphs = GraphReader(pool)
        self._runs = runs
        self._watcher = watcher

    async def CreateTaskGraph(
        self, request: pb.CreateTaskGraphRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateTaskGraphResponse:
        _require(project_id=request.project_id)
        if request.max_parallel < 0:
            raise InvalidArgument.for_field("max_parallel", "must not be negative")
        graph_id = await self._store.create_graph(
            request.project_id,
            title=request.title,
            tasks=new_tasks(list(request.tasks)),
            edges=[(e.blocker_key, e.blocked_key) for e in request.edges],
            max_parallel=request.max_parallel,
            labels=dict(request.labels),
            request_id=checked_request_id(request.request_id),
            validate_only=request.validate_only,
            llm_triage=request.llm_triage,
        )
        if graph_id is None:
            return pb.CreateTaskGraphResponse()
        view = await self._graphs.load(request.project_id, graph_id)
        return pb.CreateTaskGraphResponse(task_graph=graph_to_proto(view, with_tasks=True))

    async def AddTasks(
        self, request: pb.AddTasksRequest, context: grpc.aio.ServicerContext
    ) -> pb.AddTasksResponse:
        graph_id = _graph_id(request)
        if not request.tasks and not request.edges:
            raise InvalidArgument.for_field("tasks", "give at least one task or edge")
        ids = await self._store.add_tasks(
            request.project_id,
            graph_id,
            tasks=new_tasks(list(request.tasks)),
            edges=[(e.blocker_key, e.blocked_key) for e in request.edges],
            request_id=checked_request_id(request.request_id),
        )
        view = await self._graphs.load(request.project_id, graph_id)
        graph = graph_to_proto(view, with_tasks=True)
        wanted = set(ids)
        return pb.AddTasksResponse(
            tasks=[t for t in graph.tasks if t.id in wanted], task_graph=graph
        )

    async def GetTaskGraph(
        self, request: pb.GetTaskGraphRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetTaskGraphResponse:
        view = await self._graphs.load(request.project_id, _graph_id(request))
        return pb.GetTaskGraphResponse(task_graph=graph_to_proto(view, with_tasks=True))

    async def ListTaskGraphs(
        self, request: pb.ListTaskGraphsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListTaskGraphsResponse:
        _require(project_id=request.project_id)
        statuses = []
        for i, status in enumerate(request.statuses):
            if status == pb.TASK_GRAPH_STATUS_UNSPECIFIED:
                continue  # matches nothing (the enum's contract)
            if status not in GRAPH_STATUS_NAMES:
                raise InvalidArgument.for_field(f"statuses[{i}]", "is not a graph status")
            statuses.append(GRAPH_STATUS_NAMES[status])
        if request.statuses and not statuses:
            return pb.ListTaskGraphsResponse()  # only UNSPECIFIED: nothing matches
        views, token = await operations.list_graphs(
            self._graphs, request.project_id, _page(request), statuses=statuses
        )
        return pb.ListTaskGraphsResponse(
            task_graphs=[graph_to_proto(v, with_tasks=False) for v in views],
            next_page_token=token,
        )

    async def CancelTaskGraph(
        self, request: pb.CancelTaskGraphRequest, context: grpc.aio.ServicerContext
    ) -> pb.CancelTaskGraphResponse:
        graph_id = _graph_id(request)
        await operations.cancel_graph(
            self._pool,
            self._runs,
            request.project_id,
            graph_id,
            request.reason or DEFAULT_CANCEL_REASON,
        )
        view = await self._graphs.load(request.project_id, graph_id)
        return pb.CancelTaskGraphResponse(task_graph=graph_to_proto(view, with_tasks=True))

    async def RetryTask(
        self, request: pb.RetryTaskRequest, context: grpc.aio.ServicerContext
    ) -> pb.RetryTaskResponse:
        _require(project_id=request.project_id, task_id=request.task_id)
        task = await operations.retry_task(
            self._pool, request.project_id, request.task_id, request.feedback
        )
        return pb.RetryTaskResponse(task=task_to_proto(task))

    async def WatchTaskGraph(
        self, request: pb.WatchTaskGraphRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.TaskEvent]:
        async for event in self._watcher.watch(request.project_id, _graph_id(request)):
            yield event

    async def ListTaskSessions(
        self, request: pb.ListTaskSessionsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListTaskSessionsResponse:
        _require(project_id=request.project_id, task_id=request.task_id)
        sessions, token = await operations.list_sessions(
            self._pool, request.project_id, request.task_id, _page(request)
        )
        return pb.ListTaskSessionsResponse(
            task_sessions=[session_to_proto(s) for s in sessions], next_page_token=token
        )


async def build(context: ServiceContext) -> ServiceParts:
    settings = context.settings
    channel = service_channel(settings, "executor")
    runs = GrpcRunControl(channel)
    listener = Listener(context.database_url)
    await listener.start()
    watcher = GraphWatcher(GraphReader(context.pool), context.pool, listener)
    await watcher.start()
    servicer = DispatcherServicer(pool=context.pool, runs=runs, watcher=watcher)
    # One model client for the selector and the evaluator; its HTTP sessions close at stop.
    needs_model = (
        settings.dispatcher_selector_model
        or settings.dispatcher_evaluator_model
        or settings.dispatcher_triage_model
    )
    model_client = None
    if needs_model:
        # Its calls draw on the same shared budgets as the executors'.
        quotas = (
            ModelQuotas.from_settings(context.pool, settings)
            if settings.model_quota_enabled
            else None
        )
        model_client = GenaiModelClient.from_settings(settings, quotas=quotas)
    chooser = evaluator = None
    if model_client is not None and settings.dispatcher_selector_model is not None:
        chooser = LlmChooser(model_client, model=settings.dispatcher_selector_model)
    if model_client is not None and settings.dispatcher_evaluator_model is not None:
        evaluator = LlmEvaluator(model_client, model=settings.dispatcher_evaluator_model)
    triage = None
    if model_client is not None and settings.dispatcher_triage_model is not None:
        triage = LlmTriage(model_client, model=settings.dispatcher_triage_model)
    dispatcher = Dispatcher(
        context.pool,
        dsn=context.database_url,
        runs=runs,
        selector=Selector(context.pool, chooser=chooser),
        slots=settings.dispatcher_slots,
        timing=LoopTiming(
            lease_s=settings.dispatcher_lease_s,
            max_resumes=settings.dispatcher_max_resumes,
            task_timeout_s=settings.dispatcher_task_timeout_s,
        ),
        evaluator=evaluator,
        triage=triage,
    )

    async def close() -> None:
        await listener.close()
        await channel.close()
        if model_client is not None:
            await model_client.aclose()

    return ServiceParts(
        registrations=[Registration.of(pb, dispatcher_pb2_grpc, "DispatcherService", servicer)],
        background=[dispatcher.run],
        on_stop=[close],
    )
