"""What an A2A call does in agentfleet: executor, registry and history RPCs made with the
caller's own bearer token, so the same project tokens, roles and limits apply as to any
client. A task is a top-level run of the addressed agent; its id is the run id."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc

from agentfleet.config import Settings
from agentfleet.rpc.clients import open_channel
from agentfleet.rpc.tls import client_tls
from agentfleet.structs import struct_dict
from agentfleet.v1 import (
    common_pb2,
    executor_pb2,
    executor_pb2_grpc,
    history_pb2,
    history_pb2_grpc,
    registry_pb2,
    registry_pb2_grpc,
)

S = common_pb2.RunStatus
ENDED = frozenset({S.RUN_STATUS_COMPLETED, S.RUN_STATUS_FAILED, S.RUN_STATUS_CANCELLED})
NEEDS_INPUT = frozenset({S.RUN_STATUS_PAUSED, S.RUN_STATUS_WAITING})
STARTED_BY_LABEL = {"started_by": "a2a"}


class AccessDenied(Exception):
    """The caller may not reach this agent: ``http_status`` 401, 403 or 404."""

    def __init__(self, http_status: int, message: str) -> None:
        super().__init__(message)
        self.http_status = http_status
        self.message = message


class TaskUnknown(Exception):
    """No task with this id for this agent in this project."""


class BadRequest(Exception):
    """The message cannot start or continue a task; the text says why."""


class Exhausted(Exception):
    """A limit of the caller's token or project was reached; the text names its setting."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Caller:
    """Who calls which agent: the project and agent of the URL, and the bearer token."""

    project_id: str
    agent_name: str
    token: str

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.token}"),)


@dataclass(frozen=True, kw_only=True, slots=True)
class Decision:
    approve: bool
    reason: str


class Backend:
    """Shared channels (no token of their own) to the executor and history."""

    def __init__(self, settings: Settings) -> None:
        tls = client_tls(settings)
        self._executor_channel = open_channel(settings.addresses["executor"], tls=tls)
        self._history_channel = open_channel(settings.addresses["history"], tls=tls)
        self._executor = executor_pb2_grpc.ExecutorServiceStub(self._executor_channel)
        self._registry = registry_pb2_grpc.AgentRegistryServiceStub(self._executor_channel)
        self._history = history_pb2_grpc.HistoryServiceStub(self._history_channel)

    async def close(self) -> None:
        await self._executor_channel.close()
        await self._history_channel.close()

    async def external_agent(self, caller: Caller) -> common_pb2.AgentDefinition:
        """The addressed definition, if it is EXTERNAL and the token may read it."""
        try:
            reply = await self._registry.GetAgentDefinition(
                registry_pb2.GetAgentDefinitionRequest(
                    project_id=caller.project_id, name=caller.agent_name
                ),
                metadata=caller.metadata,
            )
        except grpc.aio.AioRpcError as exc:
            raise _access_error(exc) from None
        if reply.agent_definition.visibility != common_pb2.VISIBILITY_EXTERNAL:
            raise AccessDenied(404, f"no external agent {caller.agent_name!r} in this project")
        return reply.agent_definition

    async def external_agents(
        self, project_id: str, token: str
    ) -> list[common_pb2.AgentDefinition]:
        metadata = (("authorization", f"Bearer {token}"),)
        found: list[common_pb2.AgentDefinition] = []
        page_token = ""
        try:
            while True:
                reply = await self._registry.ListAgentDefinitions(
                    registry_pb2.ListAgentDefinitionsRequest(
                        project_id=project_id,
                        page_size=100,
                        page_token=page_token,
                        visibilities=[common_pb2.VISIBILITY_EXTERNAL],
                    ),
                    metadata=metadata,
                )
                found.extend(reply.agent_definitions)
                page_token = reply.next_page_token
                if not page_token or len(found) >= 1000:
                    return found
        except grpc.aio.AioRpcError as exc:
            raise _access_error(exc) from None

    async def start(
        self, caller: Caller, *, text: str, context_id: str, message_id: str
    ) -> common_pb2.AgentRun:
        """A new run of the agent on the thread ``context_id``; ``message_id`` makes a
        resent message return the same run."""
        try:
            return await self._executor.TriggerRun(
                executor_pb2.StartRunRequest(
                    project_id=caller.project_id,
                    agent_name=caller.agent_name,
                    input=text,
                    thread_id=context_id,
                    request_id=message_id,
                    labels=STARTED_BY_LABEL,
                ),
                metadata=caller.metadata,
            )
        except grpc.aio.AioRpcError as exc:
            raise _call_error(exc) from None

    async def run(self, caller: Caller, task_id: str) -> common_pb2.AgentRun:
        """The task's run: a top-level run of this agent in this project, else TaskUnknown."""
        return (await self.snapshot(caller, task_id))[0]

    async def snapshot(self, caller: Caller, task_id: str) -> tuple[common_pb2.AgentRun, int]:
        """The task's run and the seq of its last stored event."""
        if not _looks_like_uuid(task_id):
            raise TaskUnknown(task_id)
        try:
            reply = await self._history.GetRun(
                history_pb2.GetRunRequest(project_id=caller.project_id, run_id=task_id),
                metadata=caller.metadata,
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT):
                raise TaskUnknown(task_id) from None
            raise _call_error(exc) from None
        run = reply.run
        if run.agent_name != caller.agent_name or run.parent_run_id:
            raise TaskUnknown(task_id)
        return run, reply.last_event_seq

    async def cancel(self, caller: Caller, task_id: str) -> common_pb2.AgentRun:
        await self.run(caller, task_id)
        try:
            reply = await self._executor.CancelRun(
                executor_pb2.CancelRunRequest(
                    project_id=caller.project_id, run_id=task_id, reason="cancelled over A2A"
                ),
                metadata=caller.metadata,
            )
        except grpc.aio.AioRpcError as exc:
            raise _call_error(exc) from None
        return reply.run

    async def resume(self, caller: Caller, run: common_pb2.AgentRun, text: str) -> None:
        """Continues a PAUSED run with ``text``; returns once the resume has begun."""
        call = self._executor.ResumeRun(
            executor_pb2.ResumeRunRequest(project_id=caller.project_id, run_id=run.id, input=text),
            metadata=caller.metadata,
        )
        try:
            # The first event means the run is running again; the rest is followed by
            # WatchRun like any run, so a client that leaves does not stop it.
            async for _event in call:
                break
        except grpc.aio.AioRpcError as exc:
            raise _call_error(exc) from None
        finally:
            call.cancel()

    async def decide(self, caller: Caller, run: common_pb2.AgentRun, decision: Decision) -> None:
        """Approves or rejects every tool call of the run waiting for approval."""
        try:
            calls = await self._history.ListRunToolCalls(
                history_pb2.ListRunToolCallsRequest(
                    project_id=caller.project_id,
                    run_id=run.id,
                    page_size=100,
                    statuses=[common_pb2.TOOL_CALL_STATUS_AWAITING_APPROVAL],
                ),
                metadata=caller.metadata,
            )
            for call in calls.tool_calls:
                await self._executor.DecideToolCall(
                    executor_pb2.DecideToolCallRequest(
                        project_id=caller.project_id,
                        run_id=run.id,
                        tool_call_id=call.tool_call_id,
                        decision=(
                            executor_pb2.TOOL_CALL_DECISION_APPROVE
                            if decision.approve
                            else executor_pb2.TOOL_CALL_DECISION_REJECT
                        ),
                        reason=decision.reason,
                    ),
                    metadata=caller.metadata,
                )
        except grpc.aio.AioRpcError as exc:
            raise _call_error(exc) from None

    async def events(
        self, caller: Caller, run_id: str, after_seq: int = 0
    ) -> AsyncIterator[common_pb2.RunEvent]:
        """The run's stored then live events, until it ends or needs input."""
        call = self._history.WatchRun(
            history_pb2.WatchRunRequest(
                project_id=caller.project_id, run_id=run_id, after_seq=after_seq
            ),
            metadata=caller.metadata,
        )
        try:
            async for event in call:
                yield event
                if event.type == common_pb2.RUN_EVENT_TYPE_RUN_FINISHED or (
                    event.type == common_pb2.RUN_EVENT_TYPE_STATUS_CHANGED
                    and event.status_changed.to_status in NEEDS_INPUT
                ):
                    return
        except grpc.aio.AioRpcError as exc:
            raise _call_error(exc) from None
        finally:
            call.cancel()

    async def wait(self, caller: Caller, run_id: str, after_seq: int = 0) -> common_pb2.AgentRun:
        """The run once it has ended or needs input (after the event ``after_seq``)."""
        async for _event in self.events(caller, run_id, after_seq):
            pass
        return await self.run(caller, run_id)


def message_input(parts: list[tuple[str, object]]) -> str:
    """A run's input from a message's (kind, value) parts: text as is, data as JSON."""
    chunks = []
    for kind, value in parts:
        if kind == "text":
            chunks.append(str(value))
        elif kind == "data":
            chunks.append(json.dumps(value, ensure_ascii=False, sort_keys=True))
    return "\n\n".join(chunk for chunk in chunks if chunk.strip())


def decision_of(data_parts: list[object]) -> Decision | None:
    """A ``{"decision": "approve"|"reject", "reason": ...}`` data part, if the message has one."""
    for value in data_parts:
        if isinstance(value, dict) and "decision" in value:
            choice = value["decision"]
            if choice not in ("approve", "reject"):
                raise BadRequest('decision must be "approve" or "reject"')
            reason = value.get("reason", "")
            if not isinstance(reason, str):
                raise BadRequest("decision reason must be a string")
            if choice == "reject" and not reason.strip():
                reason = "rejected over A2A"
            return Decision(approve=choice == "approve", reason=reason)
    return None


def output_of(run: common_pb2.AgentRun) -> dict[str, object] | None:
    if not run.HasField("output"):
        return None
    return struct_dict(run.output)


def new_context_id() -> str:
    return uuid.uuid4().hex


def _looks_like_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def _access_error(exc: grpc.aio.AioRpcError) -> Exception:
    code = exc.code()
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return AccessDenied(401, "a valid bearer token is required")
    if code == grpc.StatusCode.PERMISSION_DENIED:
        return AccessDenied(403, "this token may not act on this project")
    if code in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT):
        return AccessDenied(404, "no such external agent in this project")
    return _call_error(exc)


class Unavailable(Exception):
    """A service behind this one failed or is unreachable; ``code`` is its gRPC code."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _call_error(exc: grpc.aio.AioRpcError) -> Exception:
    code = exc.code()
    if code == grpc.StatusCode.UNAUTHENTICATED or code == grpc.StatusCode.PERMISSION_DENIED:
        return _access_error(exc)
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return Exhausted(exc.details() or code.name)
    if code in (
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.ALREADY_EXISTS,
    ):
        return BadRequest(exc.details() or code.name)
    if code == grpc.StatusCode.NOT_FOUND:
        return TaskUnknown(exc.details() or "")
    return Unavailable(code, exc.details() or code.name)
