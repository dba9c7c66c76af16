"""The A2A request handler: each A2A method as the agentfleet RPCs of :mod:`backend`.

The caller (project, agent, token) was checked by :mod:`app` before the SDK's JSON-RPC
dispatcher calls in here, and is in ``context.state["caller"]``.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator

from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.request_handler import RequestHandler
from a2a.types import a2a_pb2 as a2a
from a2a.utils.errors import (
    A2AError,
    InternalError,
    InvalidParamsError,
    InvalidRequestError,
    PushNotificationNotSupportedError,
    TaskNotFoundError,
    UnsupportedOperationError,
)

from agentfleet.structs import struct_dict
from agentfleet.v1 import common_pb2
from services.a2a.backend import (
    ENDED,
    AccessDenied,
    Backend,
    BadRequest,
    Caller,
    Exhausted,
    TaskUnknown,
    Unavailable,
    decision_of,
    message_input,
    new_context_id,
)
from services.a2a.tasks import task_of, update_of

S = common_pb2.RunStatus


class AgentRequestHandler(RequestHandler):
    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    async def on_message_send(
        self, params: a2a.SendMessageRequest, context: ServerCallContext
    ) -> a2a.Task:
        caller = _caller(context)
        with _errors():
            run, after_seq = await self._begin(caller, params.message)
            if params.configuration.return_immediately:
                return task_of(run)
            return task_of(await self._backend.wait(caller, run.id, after_seq))

    async def on_message_send_stream(
        self, params: a2a.SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[object]:
        caller = _caller(context)
        with _errors():
            run, after_seq = await self._begin(caller, params.message)
        async for item in self._follow(caller, run, after_seq):
            yield item

    async def on_subscribe_to_task(
        self, params: a2a.SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[object]:
        caller = _caller(context)
        with _errors():
            run, after_seq = await self._backend.snapshot(caller, params.id)
        # The task as it is now, then what happens next: an older input-required turn in
        # the stored events must not end a subscription to a task that has moved on.
        async for item in self._follow(caller, run, after_seq):
            yield item

    async def on_get_task(
        self, params: a2a.GetTaskRequest, context: ServerCallContext
    ) -> a2a.Task | None:
        with _errors():
            return task_of(await self._backend.run(_caller(context), params.id))

    async def on_cancel_task(
        self, params: a2a.CancelTaskRequest, context: ServerCallContext
    ) -> a2a.Task | None:
        with _errors():
            return task_of(await self._backend.cancel(_caller(context), params.id))

    async def on_list_tasks(
        self, params: a2a.ListTasksRequest, context: ServerCallContext
    ) -> a2a.ListTasksResponse:
        raise UnsupportedOperationError(message="tasks/list is not served; use tasks/get")

    async def on_create_task_push_notification_config(self, params, context):  # type: ignore[no-untyped-def]
        raise PushNotificationNotSupportedError()

    async def on_get_task_push_notification_config(self, params, context):  # type: ignore[no-untyped-def]
        raise PushNotificationNotSupportedError()

    async def on_list_task_push_notification_configs(self, params, context):  # type: ignore[no-untyped-def]
        raise PushNotificationNotSupportedError()

    async def on_delete_task_push_notification_config(self, params, context):  # type: ignore[no-untyped-def]
        raise PushNotificationNotSupportedError()

    async def on_get_extended_agent_card(self, params, context):  # type: ignore[no-untyped-def]
        raise UnsupportedOperationError(message="no extended agent card")

    async def _begin(self, caller: Caller, message: a2a.Message) -> tuple[common_pb2.AgentRun, int]:
        """A new run for a message without a task id; for one naming an input-required
        task, that task continued (resumed, or its pending approval decided). With the seq
        of the run's last event before this message: what follows is this message's turn."""
        parts = _parts(message)
        if message.task_id:
            return await self._continue(caller, message.task_id, parts)
        text = message_input(parts)
        if not text:
            raise BadRequest("message.parts: a text or data part with content is required")
        run = await self._backend.start(
            caller,
            text=text,
            context_id=message.context_id or new_context_id(),
            message_id=message.message_id,
        )
        return run, 0

    async def _continue(
        self, caller: Caller, task_id: str, parts: list[tuple[str, object]]
    ) -> tuple[common_pb2.AgentRun, int]:
        run, after_seq = await self._backend.snapshot(caller, task_id)
        if run.status == S.RUN_STATUS_WAITING:
            decision = decision_of([value for kind, value in parts if kind == "data"])
            if decision is None:
                raise BadRequest(
                    'the task waits for an approval: send a data part {"decision": "approve"}'
                    ' or {"decision": "reject", "reason": "..."}'
                )
            await self._backend.decide(caller, run, decision)
        elif run.status == S.RUN_STATUS_PAUSED:
            await self._backend.resume(caller, run, message_input(parts))
        elif run.status in ENDED:
            raise BadRequest(f"task {task_id} has ended; send a new message without task_id")
        else:
            raise BadRequest(f"task {task_id} is not waiting for input")
        return await self._backend.run(caller, task_id), after_seq

    async def _follow(
        self, caller: Caller, run: common_pb2.AgentRun, after_seq: int
    ) -> AsyncGenerator[object]:
        yield task_of(run)
        if run.status in ENDED:
            return
        with _errors():
            async for event in self._backend.events(caller, run.id, after_seq):
                for update in update_of(event, run.thread_id):
                    yield update


def _caller(context: ServerCallContext) -> Caller:
    caller = context.state.get("caller")
    if not isinstance(caller, Caller):  # only app.py's endpoint dispatches here
        raise InternalError(message="request reached the handler unchecked")
    return caller


def _parts(message: a2a.Message) -> list[tuple[str, object]]:
    parts: list[tuple[str, object]] = []
    for part in message.parts:
        kind = part.WhichOneof("content")
        if kind == "text":
            parts.append(("text", part.text))
        elif kind == "data":
            parts.append(("data", struct_dict(part.data)))
        else:
            raise BadRequest(f"message.parts: {kind} parts are not accepted; send text or data")
    return parts


class _errors:
    """agentfleet errors as the A2A errors the dispatcher turns into JSON-RPC errors."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        if exc is None or isinstance(exc, A2AError):
            return
        if isinstance(exc, TaskUnknown):
            raise TaskNotFoundError() from None
        if isinstance(exc, Exhausted):
            raise InvalidRequestError(message=str(exc)) from None
        if isinstance(exc, BadRequest):
            raise InvalidParamsError(message=str(exc)) from None
        if isinstance(exc, AccessDenied):
            raise InvalidRequestError(message=exc.message) from None
        if isinstance(exc, Unavailable):
            raise InternalError(message=f"agentfleet unavailable ({exc.code.name})") from None
