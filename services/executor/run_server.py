"""ExecutorService: StartRun, TriggerRun, CancelRun, ResumeRun, DecideToolCall (protobuf <->
domain), and the parts of the executor process that run agents (:func:`build_executor_parts`).

StartRun and ResumeRun enqueue, then watch: the stream is the process's run watcher
(:mod:`agentfleet.runs.run_watch`, the one WatchRun uses), so it works whichever executor process
runs the run and is identical to a WatchRun replay.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass

import asyncpg
import grpc

from agentfleet.auth import current_principal
from agentfleet.errors import InvalidArgument, NotFound, PermissionDenied
from agentfleet.events import RunEventNotifier
from agentfleet.graph import GraphRepository
from agentfleet.postgres.db import Listener
from agentfleet.process.service_runtime import ServiceContext
from agentfleet.rpc.clients import service_channel
from agentfleet.runs.run_watch import RunWatch
from agentfleet.secrets.secrets_crypto import keyring_from
from agentfleet.secrets.values import resolve_secrets
from agentfleet.v1 import common_pb2, executor_pb2, executor_pb2_grpc
from services.executor.a2a_client import egress_policy
from services.executor.approvals.approval_requests import decision_params
from services.executor.approvals.approval_store import decide_tool_call
from services.executor.coordination.children import ChildRuns
from services.executor.coordination.coordination import Coordinator
from services.executor.coordination.flows import FlowRunner
from services.executor.coordination.tree import cancel_tree
from services.executor.model.model_client import LazyModelClient
from services.executor.queue import DEFAULT_CANCEL_REASON, RunQueue
from services.executor.registry.definitions import DefinitionRepository
from services.executor.registry.remote_agents import RemoteAgentRepository
from services.executor.remote_runs import RemoteChildRunner, RunRouter
from services.executor.run_path.loop import AgentLoop
from services.executor.run_path.resume import resume_run
from services.executor.run_requests import resume_params, run_id_violations, start_params
from services.executor.runs import RunRecord, streams_deltas
from services.executor.safety import effective_max_steps
from services.executor.store.group_commit import GroupCommit
from services.executor.task_lineage import inherit_task_limits
from services.executor.tools.tool_gateway import GrpcToolGateway, ToolGateway
from services.executor.triggers.consumer import TriggerConsumer
from services.executor.triggers.schedules import ScheduleTicker
from services.executor.worker import RunWorker, worker_name


def _check_startable(visibility: str, agent_name: str) -> None:
    """Internal agents are for agents only (seed 000 D6): spawn_agents runs them in-process and
    the dispatcher starts them with its service token; a project's own token may not.

    With auth off there is no token to tell them apart, and every caller is trusted anyway.
    """
    principal = current_principal.get()
    if visibility == "internal" and principal.token_id is not None and principal.service is None:
        raise PermissionDenied(
            f"agent {agent_name!r} has visibility internal: only agents start it "
            "(spawn_agents, or the dispatcher for a task)"
        )


@dataclass(kw_only=True, eq=False)
class ExecutorServicer(executor_pb2_grpc.ExecutorServiceServicer):
    """StartRun, TriggerRun, CancelRun, ResumeRun and DecideToolCall."""

    pool: asyncpg.Pool
    queue: RunQueue
    definitions: DefinitionRepository
    watch: RunWatch

    async def _enqueue(self, request: executor_pb2.StartRunRequest, *, followed: bool) -> RunRecord:
        params = start_params(request)
        read_definition = self.definitions.get(params.project_id, params.agent_name)
        if params.task_id is None:
            # Most runs: one read, awaited directly (gather's two tasks cost each TriggerRun
            # CPU for nothing).
            definition = await read_definition
        else:
            # Both reads at once: they are independent, and each is a round trip before the
            # run exists (the dispatcher waits on this for every task it starts).
            definition, task_found = await asyncio.gather(
                read_definition, self._task_in_project(params.project_id, params.task_id)
            )
            if not task_found:
                raise NotFound(f"task {params.task_id} not found")
        _check_startable(definition.visibility, params.agent_name)
        params.agent_definition_id = str(definition.id)
        params.stream_deltas = streams_deltas(definition.streaming, followed=followed)
        params = await inherit_task_limits(self.pool, params, definition)
        # The effective limits are the run's, stored with it: GetRun shows what bounds the
        # run (unset there means none), and a later change of the definition does not move
        # a run already accepted.
        if params.timeout_s is None:
            params.timeout_s = definition.default_timeout_s
        if params.max_steps is None:
            params.max_steps = effective_max_steps(
                requested=None, definition=definition.max_steps, depth=0
            )
        run, _created = await self.queue.enqueue(params)
        return run

    async def _task_in_project(self, project_id: str, task_id: str) -> bool:
        """task_id is only a foreign key: it must also be a graph object of this project."""
        return await GraphRepository(self.pool).exists(project_id, task_id)

    async def TriggerRun(
        self, request: executor_pb2.StartRunRequest, context: grpc.aio.ServicerContext
    ) -> common_pb2.AgentRun:
        return (await self._enqueue(request, followed=False)).to_proto()

    async def StartRun(
        self, request: executor_pb2.StartRunRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[common_pb2.RunEvent]:
        run = await self._enqueue(request, followed=True)
        async for event in self._execution(
            run, after_seq=0, include_internal=request.include_internal
        ):
            yield event

    async def CancelRun(
        self, request: executor_pb2.CancelRunRequest, context: grpc.aio.ServicerContext
    ) -> executor_pb2.CancelRunResponse:
        if problems := run_id_violations(request.run_id):
            raise InvalidArgument.for_fields(problems)
        # The whole tree: the run and every descendant, on whichever executor runs them.
        run = await cancel_tree(
            self.queue,
            self.pool,
            request.project_id,
            request.run_id,
            request.reason or DEFAULT_CANCEL_REASON,
        )
        return executor_pb2.CancelRunResponse(run=run.to_proto())

    async def ResumeRun(
        self, request: executor_pb2.ResumeRunRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[common_pb2.RunEvent]:
        resumed = await resume_run(self.pool, resume_params(request))
        async for event in self._execution(
            resumed.run, after_seq=resumed.after_seq, include_internal=request.include_internal
        ):
            yield event

    def _execution(
        self, run: RunRecord, *, after_seq: int, include_internal: bool
    ) -> AsyncIterator[common_pb2.RunEvent]:
        """Enqueue, then watch: the run's events after ``after_seq`` up to the RUN_FINISHED
        of the execution just started, from the watcher WatchRun uses."""
        return self.watch.events(
            project_id=run.project_id,
            run_id=run.id,
            after_seq=after_seq,
            include_internal=include_internal,
            until_next_finish=True,
        )

    async def DecideToolCall(
        self, request: executor_pb2.DecideToolCallRequest, context: grpc.aio.ServicerContext
    ) -> executor_pb2.DecideToolCallResponse:
        principal = current_principal.get()
        outcome = await decide_tool_call(
            self.pool, decision_params(request, decided_by=principal.token_id or "auth-off")
        )
        return executor_pb2.DecideToolCallResponse(
            run=outcome.run.to_proto(),
            status=common_pb2.ToolCallStatus.Value(
                "TOOL_CALL_STATUS_" + outcome.call_status.upper()
            ),
            waiting_tool_call_ids=outcome.waiting,
        )


def tool_gateway(pool: asyncpg.Pool, channel: grpc.aio.Channel, *, where: str) -> ToolGateway:
    """The toolpool over ``channel``; with ``where`` ``inprocess`` the built-in tools run in
    this process instead (AGENTFLEET_EXECUTOR_BUILTIN_TOOLS)."""
    toolpool = GrpcToolGateway(channel)
    if where != "inprocess":
        return toolpool
    # Imported only then: it brings the toolpool's modules into the executor.
    from services.executor.tools.builtin_tools import InProcessBuiltinTools

    return InProcessBuiltinTools(pool, toolpool)


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
    listener = Listener(context.database_url)
    await listener.start()
    # Before the worker subscribes its channels (see RunWatch.start).
    watch = RunWatch(pool=context.pool, listener=listener)
    await watch.start()
    channel = service_channel(settings, "toolpool")
    model = LazyModelClient(context)
    owner = worker_name()
    notifier = RunEventNotifier(context.pool)
    group_commit = GroupCommit(context.pool, enabled=settings.executor_group_commit == "on")
    queue = RunQueue(
        context.pool,
        max_running_per_project=settings.max_running_per_project,
        max_queued_per_project=settings.max_queued_per_project,
        notifier=notifier,
        group=group_commit,
    )
    definitions = DefinitionRepository(context.pool)
    remote_agents = RemoteAgentRepository(context.pool)
    children = ChildRuns(
        pool=context.pool,
        queue=queue,
        definitions=definitions,
        watch=watch,
        remote_agents=remote_agents,
    )
    loop = AgentLoop(
        pool=context.pool,
        definitions=definitions,
        tools=tool_gateway(context.pool, channel, where=settings.executor_builtin_tools),
        model=model,
        owner=owner,
        timeout_grace_s=timeout_grace_s,
        coordinator=Coordinator(pool=context.pool, definitions=definitions, children=children),
        flows=FlowRunner(pool=context.pool, children=children),
        notifier=notifier,
        group_commit=group_commit,
    )
    worker = RunWorker(
        queue=queue,
        executor=RunRouter(
            local=loop,
            remote=RemoteChildRunner(
                pool=context.pool,
                owner=owner,
                remote_agents=remote_agents,
                secrets=functools.partial(
                    resolve_secrets, context.pool, keyring_from(settings.secrets_keys)
                ),
                egress=egress_policy(context),
                notifier=notifier,
                group_commit=group_commit,
            ),
        ),
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
        pool=context.pool, queue=queue, definitions=definitions, watch=watch
    )
    # Every executor consumes the trigger outbox and ticks schedules: whichever claims an
    # event or a due schedule first acts on it (services.executor.triggers).
    consumer = TriggerConsumer(
        context.pool,
        listener,
        settings.trigger_limits,
        max_queued_per_project=settings.max_queued_per_project,
    )
    ticker = ScheduleTicker(context.pool)

    async def close() -> None:
        await notifier.flush()  # the worker has stopped: its last writes' notifications
        await listener.close()
        await watch.close()
        await channel.close()
        await model.aclose()

    return servicer, [worker.run, consumer.run, ticker.run], [close]
