"""Domain errors shared by every service, each mapped to one canonical gRPC code.

Hierarchy::

    AgentFleetError                      INTERNAL (never shown with details)
    ├── InvalidArgument                  INVALID_ARGUMENT, names the field(s)
    ├── NotFound                         NOT_FOUND
    ├── AlreadyExists                    ALREADY_EXISTS
    ├── FailedPrecondition               FAILED_PRECONDITION
    ├── Aborted                          ABORTED (conflicts, stale versions)
    ├── Unauthenticated                  UNAUTHENTICATED
    ├── PermissionDenied                 PERMISSION_DENIED
    ├── ResourceExhausted                RESOURCE_EXHAUSTED (limits)
    ├── Unavailable                      UNAVAILABLE (a dependency is down)
    ├── DeadlineExceeded                 DEADLINE_EXCEEDED
    └── Unimplemented                    UNIMPLEMENTED

Repositories translate driver errors into these (``raise ... from exc``); the server
interceptor in :mod:`agentfleet.rpc.grpc_server` turns them into statuses with ``google.rpc``
details. Services subclass them for their own cases.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import grpc


@dataclass(frozen=True, slots=True)
class FieldViolation:
    """One bad field of a request, reported as a ``google.rpc.BadRequest`` detail."""

    field: str
    """Path of the field, e.g. ``tasks[2].key`` or ``manifest.agents[0].name``."""
    description: str


class AgentFleetError(Exception):
    """Root of every agentfleet error. ``message`` is safe to show to the caller.

    A subclass names its gRPC code in its class line, ``class X(AgentFleetError,
    code=grpc.StatusCode.Y)``; without one it keeps its parent's."""

    code: grpc.StatusCode = grpc.StatusCode.INTERNAL

    def __init_subclass__(cls, *, code: grpc.StatusCode | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if code is not None:
            cls.code = code

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidArgument(AgentFleetError, code=grpc.StatusCode.INVALID_ARGUMENT):
    def __init__(self, message: str, violations: list[FieldViolation] | None = None) -> None:
        super().__init__(message)
        self.violations = violations or []

    @classmethod
    def for_field(cls, field: str, description: str) -> InvalidArgument:
        """The common case: one field is wrong; the message names it."""
        return cls(f"{field}: {description}", [FieldViolation(field, description)])

    @classmethod
    def for_fields(cls, violations: list[FieldViolation]) -> InvalidArgument:
        message = "; ".join(f"{v.field}: {v.description}" for v in violations[:10])
        if len(violations) > 10:
            message += f"; and {len(violations) - 10} more"
        return cls(message, violations)


class NotFound(AgentFleetError, code=grpc.StatusCode.NOT_FOUND): ...


class AlreadyExists(AgentFleetError, code=grpc.StatusCode.ALREADY_EXISTS): ...


class FailedPrecondition(AgentFleetError, code=grpc.StatusCode.FAILED_PRECONDITION): ...


class Aborted(AgentFleetError, code=grpc.StatusCode.ABORTED): ...


class Unauthenticated(AgentFleetError, code=grpc.StatusCode.UNAUTHENTICATED): ...


class PermissionDenied(AgentFleetError, code=grpc.StatusCode.PERMISSION_DENIED): ...


class ResourceExhausted(AgentFleetError, code=grpc.StatusCode.RESOURCE_EXHAUSTED): ...


class Unavailable(AgentFleetError, code=grpc.StatusCode.UNAVAILABLE): ...


class DeadlineExceeded(AgentFleetError, code=grpc.StatusCode.DEADLINE_EXCEEDED): ...


class Unimplemented(AgentFleetError, code=grpc.StatusCode.UNIMPLEMENTED): ...
