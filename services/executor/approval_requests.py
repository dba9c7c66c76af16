"""DecideToolCallRequest -> :class:`~services.executor.approval_store.Decision`: the
validation of ExecutorService.DecideToolCall's fields (protobuf <-> domain)."""

from __future__ import annotations

import uuid

from google.protobuf import json_format

from agentfleet.errors import FieldViolation, InvalidArgument
from agentfleet.request_ids import request_id_violations
from agentfleet.v1 import executor_pb2
from services.executor.approval_store import Decision

MAX_TOOL_CALL_ID_CHARS = 256
MAX_REASON_CHARS = 2000


def decision_params(request: executor_pb2.DecideToolCallRequest, *, decided_by: str) -> Decision:
    """Validates a DecideToolCallRequest; InvalidArgument names every bad field."""
    problems: list[FieldViolation] = []
    if not _is_uuid(request.run_id):
        problems.append(FieldViolation("run_id", "must be a run id (UUID)"))
    if not request.tool_call_id or len(request.tool_call_id) > MAX_TOOL_CALL_ID_CHARS:
        problems.append(
            FieldViolation("tool_call_id", f"is required, at most {MAX_TOOL_CALL_ID_CHARS} chars")
        )
    approve = request.decision == executor_pb2.TOOL_CALL_DECISION_APPROVE
    if request.decision not in (
        executor_pb2.TOOL_CALL_DECISION_APPROVE,
        executor_pb2.TOOL_CALL_DECISION_REJECT,
    ):
        problems.append(FieldViolation("decision", "must be APPROVE or REJECT"))
    elif not approve and not request.reason.strip():
        problems.append(FieldViolation("reason", "is required to reject a call"))
    if len(request.reason) > MAX_REASON_CHARS:
        problems.append(FieldViolation("reason", f"is longer than {MAX_REASON_CHARS} characters"))
    if request.HasField("arguments") and not approve:
        problems.append(FieldViolation("arguments", "may only be given with APPROVE"))
    problems += request_id_violations(request.request_id)
    if problems:
        raise InvalidArgument.for_fields(problems)
    return Decision(
        project_id=request.project_id,
        run_id=request.run_id,
        tool_call_id=request.tool_call_id,
        approve=approve,
        reason=request.reason.strip(),
        arguments=(
            json_format.MessageToDict(request.arguments) if request.HasField("arguments") else None
        ),
        request_id=request.request_id or None,
        decided_by=decided_by,
    )


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True
