"""The dispatcher's view of the executor: trigger, cancel and resume runs over gRPC."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Protocol

import grpc

from agentfleet.timestamps import duration_proto
from agentfleet.v1 import executor_pb2, executor_pb2_grpc

__all__ = ["CredentialRejected", "GrpcRunControl", "RunControl", "RunRequest", "TriggerRefused"]

RESUME_ACCEPT_TIMEOUT_S = 10.0


class TriggerRefused(Exception):
    """The executor refused the run for good (unknown agent, bad input): a failed attempt."""


class CredentialRejected(Exception):
    """The executor rejected the dispatcher's own credential (UNAUTHENTICATED): no task can
    start until the service token is fixed, so this is not a failure of the task."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RunRequest:
    """The run of one attempt, as TriggerRun asks for it."""

    project_id: str
    agent_name: str
    input: str
    request_id: str
    """The attempt's session id: an adopter of the attempt gets the same run."""
    task_id: str
    timeout_s: float | None


class RunControl(Protocol):
    async def trigger(self, run: RunRequest) -> str:
        """Queues a run (idempotent by request_id); returns its id. TriggerRefused when the
        executor refuses the request itself, CredentialRejected when it rejects the caller's
        credential; other errors are transient."""
        ...

    async def cancel(self, project_id: str, run_id: str, reason: str) -> None: ...

    async def resume(self, project_id: str, run_id: str, request_id: str) -> str | None:
        """Resumes a paused run; None when it was accepted, else why it cannot be."""
        ...


_REFUSED = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.PERMISSION_DENIED,
}


class GrpcRunControl:
    """RunControl on one channel to the executor (the process's one channel)."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self._stub = executor_pb2_grpc.ExecutorServiceStub(channel)

    async def trigger(self, run: RunRequest) -> str:
        request = executor_pb2.StartRunRequest(
            project_id=run.project_id,
            agent_name=run.agent_name,
            input=run.input,
            request_id=run.request_id,
            task_id=run.task_id,
        )
        if run.timeout_s:
            request.timeout.CopyFrom(duration_proto(run.timeout_s))
        try:
            started = await self._stub.TriggerRun(request, timeout=30.0)
        except grpc.aio.AioRpcError as exc:
            if exc.code() in _REFUSED:
                raise TriggerRefused(exc.details() or exc.code().name) from exc
            if exc.code() == grpc.StatusCode.UNAUTHENTICATED:
                raise CredentialRejected(exc.details() or exc.code().name) from exc
            raise
        return started.id

    async def cancel(self, project_id: str, run_id: str, reason: str) -> None:
        with contextlib.suppress(grpc.aio.AioRpcError):
            await self._stub.CancelRun(
                executor_pb2.CancelRunRequest(project_id=project_id, run_id=run_id, reason=reason),
                timeout=10.0,
            )

    async def resume(self, project_id: str, run_id: str, request_id: str) -> str | None:
        """Opens the ResumeRun stream until its first event proves the resume was accepted,
        then stops reading (the run goes on; the dispatcher follows it by NOTIFY)."""
        call = self._stub.ResumeRun(
            executor_pb2.ResumeRunRequest(
                project_id=project_id, run_id=run_id, request_id=request_id
            )
        )
        try:
            async with asyncio.timeout(RESUME_ACCEPT_TIMEOUT_S):
                async for _event in call:
                    return None
            return "ResumeRun ended without an event"
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                return "the executor cannot resume runs yet (ResumeRun is unimplemented)"
            return f"ResumeRun refused: {exc.details() or exc.code().name}"
        except TimeoutError:
            return "ResumeRun did not answer in time"
        finally:
            call.cancel()
