"""StartRun and ResumeRun requests checked and turned into the queue's parameters.

Every bad field is named in one INVALID_ARGUMENT (``google.rpc.BadRequest``), so a caller
fixes them all at once; a request that passes is a :class:`StartRunParams` or
:class:`ResumeParams`.
"""

from __future__ import annotations

from agentfleet.errors import FieldViolation, InvalidArgument
from agentfleet.graph.task_properties import is_uuid
from agentfleet.observability.telemetry import current_trace_id
from agentfleet.request_ids import request_fingerprint, request_id_violations
from agentfleet.run_limits import MAX_TOTAL_STEPS, TIMEOUT_RANGE, timeout_allowed
from agentfleet.v1 import executor_pb2
from services.executor.run_path.resume import ResumeParams
from services.executor.runs import StartRunParams
from services.executor.threads import THREAD_ID_PATTERN

TRIGGER_REQUEST_PREFIX = "trigger:"
"""request_id prefix of the runs triggers start, reserved for them."""
MAX_INPUT_BYTES = 1024 * 1024
MAX_LABELS = 32
MAX_TREE_COST_NANOS = 10**15
"""USD 1,000,000: a larger tree limit is a typo, not a budget."""


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
    problems += request_id_violations(request.request_id)
    if request.request_id.startswith(TRIGGER_REQUEST_PREFIX):
        # The trigger consumer's own keys: a caller's run under one would pass for the
        # run a trigger started (services.executor.triggers.consumer).
        problems.append(
            FieldViolation("request_id", f"may not start with {TRIGGER_REQUEST_PREFIX!r}")
        )
    if request.task_id and not is_uuid(request.task_id):
        problems.append(FieldViolation("task_id", "must be a UUID"))
    if request.thread_id and not THREAD_ID_PATTERN.match(request.thread_id):
        problems.append(
            FieldViolation("thread_id", "must be 1 to 128 letters, digits or . _ : - characters")
        )
    max_tree_cost = None
    if request.HasField("max_tree_cost_nanos"):
        max_tree_cost = request.max_tree_cost_nanos
        if not 0 < max_tree_cost <= MAX_TREE_COST_NANOS:
            problems.append(
                FieldViolation("max_tree_cost_nanos", f"must be 1 to {MAX_TREE_COST_NANOS}")
            )
    if problems:
        raise InvalidArgument.for_fields(problems)
    params = StartRunParams(
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
        max_tree_cost_nanos=max_tree_cost,
    )
    if params.request_id is not None:
        params.request_fingerprint = start_fingerprint(params)
    return params


def start_fingerprint(params: StartRunParams) -> str:
    """What a StartRun/TriggerRun request asks, for its ``request_id``: the validated fields
    that shape the run. Not ``include_internal`` (what a stream shows) nor which of the two
    RPCs (TriggerRun, then StartRun to follow the same run, is one request), nor the trace."""
    asked: dict[str, object] = {
        "agent_name": params.agent_name,
        "input": params.input,
        "max_steps": params.max_steps,
        "timeout_s": params.timeout_s,
        "labels": dict(params.labels),
        "task_id": params.task_id,
        "thread_id": params.thread_id,
    }
    # Only when set, so the fingerprints stored before the field keep matching their repeats.
    if params.max_tree_cost_nanos is not None:
        asked["max_tree_cost_nanos"] = params.max_tree_cost_nanos
    return request_fingerprint(asked)


def _budget(
    request: executor_pb2.StartRunRequest | executor_pb2.ResumeRunRequest,
    problems: list[FieldViolation],
) -> tuple[int | None, float | None]:
    """The request's max_steps and timeout (None when unset); bad values go to ``problems``."""
    max_steps: int | None = None
    if request.HasField("max_steps"):
        max_steps = request.max_steps
        if not 1 <= max_steps <= MAX_TOTAL_STEPS:
            problems.append(FieldViolation("max_steps", f"must be 1 to {MAX_TOTAL_STEPS}"))
    timeout_s: float | None = None
    if request.HasField("timeout"):
        timeout_s = request.timeout.seconds + request.timeout.nanos / 1e9
        if not timeout_allowed(timeout_s):
            problems.append(FieldViolation("timeout", f"must be {TIMEOUT_RANGE}"))
    return max_steps, timeout_s


def resume_params(request: executor_pb2.ResumeRunRequest) -> ResumeParams:
    """Validates a ResumeRunRequest; InvalidArgument names every bad field."""
    problems = run_id_violations(request.run_id)
    if len(request.input.encode()) > MAX_INPUT_BYTES:
        problems.append(FieldViolation("input", f"is larger than {MAX_INPUT_BYTES} bytes"))
    max_steps, timeout_s = _budget(request, problems)
    request_id = checked_request(problems, request.request_id)
    return ResumeParams(
        project_id=request.project_id,
        run_id=request.run_id,
        input=request.input,
        max_steps=max_steps,
        timeout_s=timeout_s,
        request_id=request_id,
        request_fingerprint=(
            resume_fingerprint(request.input, max_steps, timeout_s) if request_id else None
        ),
    )


def resume_fingerprint(input_text: str, max_steps: int | None, timeout_s: float | None) -> str:
    """What a ResumeRun request asks, for its ``request_id`` (scoped to the run): the
    validated input and budget. Not ``include_internal``, which only changes the stream."""
    return request_fingerprint(
        {"input": input_text, "max_steps": max_steps, "timeout_s": timeout_s}
    )


def run_id_violations(run_id: str) -> list[FieldViolation]:
    """The problem of a request's ``run_id`` (ResumeRun, DecideToolCall): none, or no UUID."""
    return [] if is_uuid(run_id) else [FieldViolation("run_id", "must be a run id (UUID)")]


def checked_request(problems: list[FieldViolation], request_id: str) -> str | None:
    """The request's ``request_id`` (None when unset) once it and the other fields passed;
    otherwise one InvalidArgument naming ``problems`` and the request_id's own."""
    problems = [*problems, *request_id_violations(request_id)]
    if problems:
        raise InvalidArgument.for_fields(problems)
    return request_id or None
