"""ExecutorService: StartRun, TriggerRun, CancelRun, ResumeRun, DecideToolCall (protobuf <->
domain), and the parts of the executor process that run agents (:func:`build_executor_parts`).

StartRun follows the run's events from the database, woken by ``NOTIFY
agentfleet_run_events``, so the stream works whichever executor process runs the run and
is identical to a WatchRun replay.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import asyncpg
import grpc

from agentfleet import events, events_delta, metrics
from agentfleet.auth import current_principal
from agentfleet.clients import service_channel
from agentfleet.db import Listener, Notification
from agentfleet.errors import FailedPrecondition, FieldViolation, InvalidArgument, NotFound
from agentfleet.llm import GenaiModelClient, ModelReply, RetryPolicy
from agentfleet.service_runtime import ServiceContext
from agentfleet.telemetry import current_trace_id
from agentfleet.v1 import common_pb2, executor_pb2, executor_pb2_grpc
from services.executor.approval_requests import decision_params
from services.executor.approval_store import decide_tool_call
from services.executor.children import ChildRuns
from services.executor.coordination import Coordinator
from services.executor.definitions import DefinitionRepository
from services.executor.flows import FlowRunner
from services.executor.loop import AgentLoop
from services.executor.queue import DEFAULT_CANCEL_REASON, RunQueue
from services.executor.resume import ResumeParams, resume_run
from services.executor.runs import RunRecord, StartRunParams
from services.executor.task_lineage import inherit_task_limits
from services.executor.threads import THREAD_ID_PATTERN
from services.executor.tool_gateway import GrpcToolGateway
from services.executor.tree import cancel_tree
from services.executor.worker import RunWorker, worker_name

MAX_INPUT_BYTES = 1024 * 1024
MAX_STEPS_LIMIT = 500
MAX_TIMEOUT_S = 24 * 3600
MAX_LABELS = 32
MAX_REQUEST_ID_CHARS = 128
FOLLOW_POLL_S = 2.0
"""StartRun re-reads the events this often even without a NOTIFY (a lost notification)."""


def start_params(request: executor_pb2.StartRunRequest) -> StartRunParams:
    """Validates a StartRunRequest; InvalidArgument names every bad field."""
    problems: list[FieldViolation] = []
    if not request.agent_name.strip():
        problems.append(FieldViolation("agent_name", "is required"))
    if not request.input.strip():
        problems.append(FieldViolation("input", "is required"))
    elif len(request.input.encode()) > MAX_INPUT_BYTES:
        problems.append(FieldViolation("input", f"is larger than {MAX_INPUT_BYTES} bytes"))
    max_steps, timeout_s = _budget(request, problems)
    if len(request.labels) > MAX_LABELS:
        problems.append(FieldViolation("labels", f"at most {MAX_LABELS} labels"))
    for key, value in request.labels.items():
        if not 1 <= len(key) <= 63:
            problems.append(FieldViolation(f"labels[{key!r}]", "keys are 1 to 63 characters"))
        if len(value) > 256:
            problems.append(FieldViolation(f"labels[{key!r}]", "values are at most 256 chars"))
    if len(request.request_id) > MAX_REQUEST_ID_CHARS:
        problems.append(
            FieldViolation("request_id", f"is longer than {MAX_REQUEST_ID_CHARS} characters")
        )
    if request.task_id and not _is_uuid(request.task_id):
        problems.append(FieldViolation("task_id", "must be a UUID"))
    if request.thread_id and not THREAD_ID_PATTERN.match(request.thread_id):
        problems.append(
            FieldViolation("thread_id", "must be 1 to 128 letters, digits or . _ : - characters")
        )
    if problems:
        raise InvalidArgument.for_fields(problems)
    return StartRunParams(
        project_id=request.project_id,
        agent_name=request.agent_name.strip(),
        agent_definition_id=None,
        input=request.input,
        max_steps=max_steps,
        timeout_s=timeout_s,
        labels=dict(request.labels),
        request_id=request.request_id or None,
        task_id=request.task_id or None,
        trace_id=current_trace_id(),
        thread_id=request.thread_id or None,
    )


def _budget(
    request: executor_pb2.StartRunRequest | executor_pb2.ResumeRunRequest,
    problems: list[FieldViolation],
) -> tuple[int | None, float | None]:
    """The request's max_steps and timeout (None when unset); bad values go to ``problems``."""
    max_steps: int | None = None
    if request.HasField("max_steps"):
        max_steps = request.max_steps
        if not 1 <= max_steps <= MAX_STEPS_LIMIT:
            problems.append(FieldViolation("max_steps", f"must be 1 to {MAX_STEPS_LIMIT}"))
    timeout_s: float | None = None
    if request.HasField("timeout"):
        timeout_s = request.timeout.seconds + request.timeout.nanos / 1e9
        if not 0 < timeout_s <= MAX_TIMEOUT_S:
            problems.append(
                FieldViolation("timeout", f"must be more than 0 and at most {MAX_TIMEOUT_S}s")
            )
    return max_steps, timeout_s


def resume_params(request: executor_pb2.ResumeRunRequest) -> ResumeParams:
    """Validates a ResumeRunRequest; InvalidArgument names every bad field."""
    problems: list[FieldViolation] = []
    if not _is_uuid(request.run_id):
        problems.append(FieldViolation("run_id", "must be a run id (UUID)"))
    if len(request.input.encode()) > MAX_INPUT_BYTES:
        problems.append(FieldViolation("input", f"is larger than {MAX_INPUT_BYTES} bytes"))
    max_steps, timeout_s = _budget(request, problems)
    if len(request.request_id) > MAX_REQUEST_ID_CHARS:
        problems.append(
            FieldViolation("request_id", f"is longer than {MAX_REQUEST_ID_CHARS} characters")
        )
    if problems:
        raise InvalidArgument.for_fields(problems)
    return ResumeParams(
        project_id=request.project_id,
        run_id=request.run_id,
        input=request.input,
        max_steps=max_steps,
        timeout_s=timeout_s,
        request_id=request.request_id or None,
    )


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


class ExecutorServicer(executor_pb2_grpc.ExecutorServiceServicer):
    """StartRun, TriggerRun, CancelRun, ResumeRun and DecideToolCall."""

    def __init__(
        self,
        *,
        pool: asyncpg.Pool,
        queue: RunQueue,
        definitions: DefinitionRepository,
        listener: Listener,
    ) -> None:
        self._pool = pool
        self._queue = queue
        self._definitions = definitions
        self._listener = listener

    async def _enqueue(self, request: executor_pb2.StartRunRequest) -> RunRecord:
        params = start_params(request)
        # Both reads at once: they are independent, and each is a round trip before the run
        # exists (the dispatcher waits on this for every task it starts).
        definition, task_found = await asyncio.gather(
            self._definitions.get(params.project_id, params.agent_name),
            self._task_in_project(params),
        )
        if not task_found:
            raise NotFound(f"task {params.task_id} not found")
        params.agent_definition_id = str(definition.id)
        params = await inherit_task_limits(self._pool, params, definition)
        run, _created = await self._queue.enqueue(params)
        return run

    async def _task_in_project(self, params: StartRunParams) -> bool:
        """task_id is only a foreign key: it must also be a graph object of this project."""
        if params.task_id is None:
            return True
        return bool(
            await self._pool.fetchval(
                "SELECT EXISTS (SELECT 1 FROM kb.graph_objects WHERE id = $1::uuid"
                " AND project_id = $2)",
                params.task_id,
                params.project_id,
            )
        )

    async def TriggerRun(
        self, request: executor_pb2.StartRunRequest, context: grpc.aio.ServicerContext
    ) -> common_pb2.AgentRun:
        return (await self._enqueue(request)).to_proto()

    async def StartRun(
        self, request: executor_pb2.StartRunRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[common_pb2.RunEvent]:
        run = await self._enqueue(request)
        async for event in self.follow(run, include_internal=request.include_internal):
            yield event

    async def CancelRun(
        self, request: executor_pb2.CancelRunRequest, context: grpc.aio.ServicerContext
    ) -> executor_pb2.CancelRunResponse:
        if not _is_uuid(request.run_id):
            raise InvalidArgument.for_field("run_id", "must be a run id (UUID)")
        # The whole tree: the run and every descendant, on whichever executor runs them.
        run = await cancel_tree(
            self._queue,
            self._pool,
            request.project_id,
            request.run_id,
            request.reason or DEFAULT_CANCEL_REASON,
        )
        return executor_pb2.CancelRunResponse(run=run.to_proto())

    async def ResumeRun(
        self, request: executor_pb2.ResumeRunRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[common_pb2.RunEvent]:
        resumed = await resume_run(self._pool, resume_params(request))
        async for event in self.follow(
            resumed.run, include_internal=request.include_internal, after_seq=resumed.after_seq
        ):
            yield event

    async def DecideToolCall(
        self, request: executor_pb2.DecideToolCallRequest, context: grpc.aio.ServicerContext
    ) -> executor_pb2.DecideToolCallResponse:
        principal = current_principal.get()
        outcome = await decide_tool_call(
            self._pool, decision_params(request, decided_by=principal.token_id or "auth-off")
        )
        self._queue.publish(outcome.stored)
        return executor_pb2.DecideToolCallResponse(
            run=RunRecord.from_row(outcome.run).to_proto(),
            status=common_pb2.ToolCallStatus.Value(
                "TOOL_CALL_STATUS_" + outcome.call_status.upper()
            ),
            waiting_tool_call_ids=outcome.waiting,
        )

    async def follow(
        self, run: RunRecord, *, include_internal: bool, after_seq: int = 0
    ) -> AsyncIterator[common_pb2.RunEvent]:
        """The run's events after ``after_seq``, live, until the next RUN_FINISHED; the
        transient MODEL_TEXT_DELTA pieces of streamed replies in between
        (:mod:`agentfleet.events_delta`)."""
        signal = asyncio.Event()
        deltas = events_delta.DeltaFollower(run.id, wake=signal)

        def on_notify(notification: Notification) -> None:
            parsed = events.parse_notification(notification.payload)
            if parsed is not None and parsed[0] == run.id:
                signal.set()

        await self._listener.subscribe(events.CHANNEL, on_notify)
        await self._listener.subscribe(events_delta.DELTA_CHANNEL, deltas.on_notification)
        try:
            last_seq = after_seq
            trace_id = run.trace_id
            while True:
                signal.clear()
                for delta in deltas.take(last_seq):
                    yield events_delta.delta_to_proto(
                        delta, parent_run_id=run.parent_run_id, trace_id=trace_id
                    )
                batch = await events.read_events(
                    self._pool,
                    project_id=run.project_id,
                    run_id=run.id,
                    after_seq=last_seq,
                    include_internal=True,
                )
                for persisted in batch:
                    for delta in deltas.take(last_seq, upto=persisted.seq):
                        yield events_delta.delta_to_proto(
                            delta, parent_run_id=run.parent_run_id, trace_id=trace_id
                        )
                    last_seq = persisted.seq
                    if persisted.event.type == "run_started" and trace_id is None:
                        trace_id = (await self._queue.get(run.project_id, run.id)).trace_id
                    if persisted.event.is_internal and not include_internal:
                        continue
                    yield events.to_proto(
                        persisted, parent_run_id=run.parent_run_id, trace_id=trace_id
                    )
                    if persisted.is_terminal:
                        return
                if not batch:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(signal.wait(), timeout=FOLLOW_POLL_S)
        finally:
            await self._listener.unsubscribe(events_delta.DELTA_CHANNEL, deltas.on_notification)
            await self._listener.unsubscribe(events.CHANNEL, on_notify)


class _LazyModelClient:
    """Builds the google-genai client at the first model call, so an executor without a
    model configured still starts (and its runs fail with the reason)."""

    def __init__(self, context: ServiceContext) -> None:
        self._context = context
        self._client: GenaiModelClient | None = None

    async def generate(self, **kwargs: Any) -> ModelReply:
        client = self._built()
        return await metrics.timed_model_call(
            client.generate(**kwargs), model=str(kwargs.get("model", ""))
        )

    async def generate_stream(self, **kwargs: Any) -> ModelReply:
        client = self._built()
        return await metrics.timed_model_call(
            client.generate_stream(**kwargs), model=str(kwargs.get("model", ""))
        )

    def _built(self) -> GenaiModelClient:
        if self._client is None:
            settings = self._context.settings
            retry = RetryPolicy(
                max_attempts=settings.model_max_attempts,
                base_delay_s=settings.model_retry_base_s,
            )
            try:
                self._client = GenaiModelClient.from_settings(settings, retry=retry)
            except ValueError as exc:  # ConfigError: no model configured
                raise FailedPrecondition(f"no model available: {exc}") from exc
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()


async def build_executor_parts(
    context: ServiceContext,
    *,
    concurrency: int | None = None,
    lease_s: float | None = None,
    heartbeat_s: float | None = None,
    timeout_grace_s: float | None = None,
) -> tuple[
    ExecutorServicer,
    Sequence[Callable[[asyncio.Event], Awaitable[None]]],
    Sequence[Callable[[], Awaitable[None]]],
]:
    """The ExecutorService servicer, the run worker loop, and the cleanups of both.

    Unset lease, heartbeat and grace values come from the settings
    (AGENTFLEET_EXECUTOR_LEASE_S, AGENTFLEET_EXECUTOR_HEARTBEAT_S, AGENTFLEET_TIMEOUT_GRACE_S).
    """
    settings = context.settings
    lease_s = lease_s or settings.executor_lease_s
    heartbeat_s = heartbeat_s or settings.executor_heartbeat_s
    timeout_grace_s = timeout_grace_s or settings.timeout_grace_s
    hub = events.EventHub()
    listener = Listener(context.database_url)
    await listener.start()
    channel = service_channel(settings, "toolpool")
    model = _LazyModelClient(context)
    owner = worker_name()
    queue = RunQueue(
        context.pool,
        hub=hub,
        max_running_per_project=settings.max_running_per_project,
        max_queued_per_project=settings.max_queued_per_project,
    )
    definitions = DefinitionRepository(context.pool)
    children = ChildRuns(
        pool=context.pool, queue=queue, definitions=definitions, listener=listener, hub=hub
    )
    loop = AgentLoop(
        pool=context.pool,
        definitions=definitions,
        tools=GrpcToolGateway(channel),
        model=model,
        owner=owner,
        hub=hub,
        timeout_grace_s=timeout_grace_s,
        coordinator=Coordinator(pool=context.pool, definitions=definitions, children=children),
        flows=FlowRunner(pool=context.pool, children=children),
    )
    worker = RunWorker(
        queue=queue,
        executor=loop,
        listener=listener,
        owner=owner,
        concurrency=concurrency or settings.executor_concurrency,
        lease_s=lease_s,
        heartbeat_s=heartbeat_s,
        drain_s=min(10.0, settings.shutdown_grace_s / 2),
        # Expired leases are found by polling: poll at least as often as a lease lasts.
        poll_s=min(1.0, lease_s / 2),
    )
    servicer = ExecutorServicer(
        pool=context.pool, queue=queue, definitions=definitions, listener=listener
    )

    async def close() -> None:
        hub.close()
        await listener.close()
        await channel.close()
        await model.aclose()

    return servicer, [worker.run], [close]
