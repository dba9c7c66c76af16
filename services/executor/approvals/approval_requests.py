"""DecideToolCallRequest -> :class:`~services.executor.approvals.approval_store.Decision`: the
validation of ExecutorService.DecideToolCall's fields (protobuf <-> domain)."""

from __future__ import annotations

from agentfleet.errors import FieldViolation
from agentfleet.structs import struct_dict
from agentfleet.v1 import executor_pb2
from services.executor.approvals.approval_store import Decision
from services.executor.run_requests import checked_request, run_id_violations

MAX_TOOL_CALL_ID_CHARS = 256
MAX_REASON_CHARS = 2000


def decision_params(request: executor_pb2.DecideToolCallRequest, *, decided_by: str) -> Decision:
    """Validates a DecideToolCallRequest; InvalidArgument names every bad field."""
    problems = run_id_violations(request.run_id)
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
    request_id = checked_request(problems, request.request_id)
    return Decision(
        project_id=request.project_id,
        run_id=request.run_id,
        tool_call_id=request.tool_call_id,
        approve=approve,
        reason=request.reason.strip(),
        arguments=(struct_dict(request.arguments) if request.HasField("arguments") else None),
        request_id=request_id,
        decided_by=decided_by,
    )
