import datetime

from agentfleet.v1 import common_pb2 as _common_pb2
from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PruneHistoryRequest(_message.Message):
    __slots__ = ("project_id", "dry_run", "max_runs")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    MAX_RUNS_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    dry_run: bool
    max_runs: int
    def __init__(self, project_id: _Optional[str] = ..., dry_run: _Optional[bool] = ..., max_runs: _Optional[int] = ...) -> None: ...

class PruneHistoryResponse(_message.Message):
    __slots__ = ("runs", "messages", "tool_calls", "events", "keep_days", "cutoff", "more", "trigger_firings")
    RUNS_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    KEEP_DAYS_FIELD_NUMBER: _ClassVar[int]
    CUTOFF_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_FIRINGS_FIELD_NUMBER: _ClassVar[int]
    runs: int
    messages: int
    tool_calls: int
    events: int
    keep_days: int
    cutoff: _timestamp_pb2.Timestamp
    more: bool
    trigger_firings: int
    def __init__(self, runs: _Optional[int] = ..., messages: _Optional[int] = ..., tool_calls: _Optional[int] = ..., events: _Optional[int] = ..., keep_days: _Optional[int] = ..., cutoff: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., more: _Optional[bool] = ..., trigger_firings: _Optional[int] = ...) -> None: ...

class SetHistoryRetentionRequest(_message.Message):
    __slots__ = ("project_id", "keep_days")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    KEEP_DAYS_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    keep_days: int
    def __init__(self, project_id: _Optional[str] = ..., keep_days: _Optional[int] = ...) -> None: ...

class SetHistoryRetentionResponse(_message.Message):
    __slots__ = ("keep_days", "project_setting")
    KEEP_DAYS_FIELD_NUMBER: _ClassVar[int]
    PROJECT_SETTING_FIELD_NUMBER: _ClassVar[int]
    keep_days: int
    project_setting: bool
    def __init__(self, keep_days: _Optional[int] = ..., project_setting: _Optional[bool] = ...) -> None: ...

class RunSummary(_message.Message):
    __slots__ = ("id", "agent_name", "status", "parent_run_id", "root_run_id", "depth", "total_steps", "tokens_in", "tokens_out", "input_preview", "input_truncated", "create_time", "complete_time", "duration", "resume_count", "task_id", "labels", "thread_id", "cost_nanos", "remote", "started_by", "chain_depth")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_NAME_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    PARENT_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ROOT_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    TOTAL_STEPS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_IN_FIELD_NUMBER: _ClassVar[int]
    TOKENS_OUT_FIELD_NUMBER: _ClassVar[int]
    INPUT_PREVIEW_FIELD_NUMBER: _ClassVar[int]
    INPUT_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_TIME_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    RESUME_COUNT_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    COST_NANOS_FIELD_NUMBER: _ClassVar[int]
    REMOTE_FIELD_NUMBER: _ClassVar[int]
    STARTED_BY_FIELD_NUMBER: _ClassVar[int]
    CHAIN_DEPTH_FIELD_NUMBER: _ClassVar[int]
    id: str
    agent_name: str
    status: _common_pb2.RunStatus
    parent_run_id: str
    root_run_id: str
    depth: int
    total_steps: int
    tokens_in: int
    tokens_out: int
    input_preview: str
    input_truncated: bool
    create_time: _timestamp_pb2.Timestamp
    complete_time: _timestamp_pb2.Timestamp
    duration: _duration_pb2.Duration
    resume_count: int
    task_id: str
    labels: _containers.ScalarMap[str, str]
    thread_id: str
    cost_nanos: int
    remote: _common_pb2.RemoteRun
    started_by: str
    chain_depth: int
    def __init__(self, id: _Optional[str] = ..., agent_name: _Optional[str] = ..., status: _Optional[_Union[_common_pb2.RunStatus, str]] = ..., parent_run_id: _Optional[str] = ..., root_run_id: _Optional[str] = ..., depth: _Optional[int] = ..., total_steps: _Optional[int] = ..., tokens_in: _Optional[int] = ..., tokens_out: _Optional[int] = ..., input_preview: _Optional[str] = ..., input_truncated: _Optional[bool] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., complete_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., resume_count: _Optional[int] = ..., task_id: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., thread_id: _Optional[str] = ..., cost_nanos: _Optional[int] = ..., remote: _Optional[_Union[_common_pb2.RemoteRun, _Mapping]] = ..., started_by: _Optional[str] = ..., chain_depth: _Optional[int] = ...) -> None: ...

class MessageSummary(_message.Message):
    __slots__ = ("id", "run_id", "seq", "step", "role", "agent_name", "preview", "truncated", "size_bytes", "function_names", "tokens", "is_internal", "create_time", "model_name", "cost_nanos")
    ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    AGENT_NAME_FIELD_NUMBER: _ClassVar[int]
    PREVIEW_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_NAMES_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    IS_INTERNAL_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    COST_NANOS_FIELD_NUMBER: _ClassVar[int]
    id: str
    run_id: str
    seq: int
    step: int
    role: _common_pb2.MessageRole
    agent_name: str
    preview: str
    truncated: bool
    size_bytes: int
    function_names: _containers.RepeatedScalarFieldContainer[str]
    tokens: int
    is_internal: bool
    create_time: _timestamp_pb2.Timestamp
    model_name: str
    cost_nanos: int
    def __init__(self, id: _Optional[str] = ..., run_id: _Optional[str] = ..., seq: _Optional[int] = ..., step: _Optional[int] = ..., role: _Optional[_Union[_common_pb2.MessageRole, str]] = ..., agent_name: _Optional[str] = ..., preview: _Optional[str] = ..., truncated: _Optional[bool] = ..., size_bytes: _Optional[int] = ..., function_names: _Optional[_Iterable[str]] = ..., tokens: _Optional[int] = ..., is_internal: _Optional[bool] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., model_name: _Optional[str] = ..., cost_nanos: _Optional[int] = ...) -> None: ...

class RunMessage(_message.Message):
    __slots__ = ("id", "run_id", "seq", "step", "role", "agent_name", "content", "tokens", "is_internal", "create_time", "model_name", "cost_nanos")
    ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    AGENT_NAME_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    IS_INTERNAL_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    COST_NANOS_FIELD_NUMBER: _ClassVar[int]
    id: str
    run_id: str
    seq: int
    step: int
    role: _common_pb2.MessageRole
    agent_name: str
    content: _struct_pb2.Struct
    tokens: int
    is_internal: bool
    create_time: _timestamp_pb2.Timestamp
    model_name: str
    cost_nanos: int
    def __init__(self, id: _Optional[str] = ..., run_id: _Optional[str] = ..., seq: _Optional[int] = ..., step: _Optional[int] = ..., role: _Optional[_Union[_common_pb2.MessageRole, str]] = ..., agent_name: _Optional[str] = ..., content: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., tokens: _Optional[int] = ..., is_internal: _Optional[bool] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., model_name: _Optional[str] = ..., cost_nanos: _Optional[int] = ...) -> None: ...

class ToolCallSummary(_message.Message):
    __slots__ = ("id", "run_id", "tool_call_id", "step", "tool_name", "source", "status", "duration", "error_preview", "input_size_bytes", "output_size_bytes", "child_run_ids", "create_time")
    ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    ERROR_PREVIEW_FIELD_NUMBER: _ClassVar[int]
    INPUT_SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    CHILD_RUN_IDS_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    id: str
    run_id: str
    tool_call_id: str
    step: int
    tool_name: str
    source: _common_pb2.ToolSource
    status: _common_pb2.ToolCallStatus
    duration: _duration_pb2.Duration
    error_preview: str
    input_size_bytes: int
    output_size_bytes: int
    child_run_ids: _containers.RepeatedScalarFieldContainer[str]
    create_time: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[str] = ..., run_id: _Optional[str] = ..., tool_call_id: _Optional[str] = ..., step: _Optional[int] = ..., tool_name: _Optional[str] = ..., source: _Optional[_Union[_common_pb2.ToolSource, _Mapping]] = ..., status: _Optional[_Union[_common_pb2.ToolCallStatus, str]] = ..., duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., error_preview: _Optional[str] = ..., input_size_bytes: _Optional[int] = ..., output_size_bytes: _Optional[int] = ..., child_run_ids: _Optional[_Iterable[str]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ToolCall(_message.Message):
    __slots__ = ("id", "run_id", "message_id", "tool_call_id", "step", "tool_name", "source", "input", "output", "status", "error", "duration", "child_run_ids", "create_time", "complete_time")
    ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    CHILD_RUN_IDS_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_TIME_FIELD_NUMBER: _ClassVar[int]
    id: str
    run_id: str
    message_id: str
    tool_call_id: str
    step: int
    tool_name: str
    source: _common_pb2.ToolSource
    input: _struct_pb2.Struct
    output: _struct_pb2.Struct
    status: _common_pb2.ToolCallStatus
    error: str
    duration: _duration_pb2.Duration
    child_run_ids: _containers.RepeatedScalarFieldContainer[str]
    create_time: _timestamp_pb2.Timestamp
    complete_time: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[str] = ..., run_id: _Optional[str] = ..., message_id: _Optional[str] = ..., tool_call_id: _Optional[str] = ..., step: _Optional[int] = ..., tool_name: _Optional[str] = ..., source: _Optional[_Union[_common_pb2.ToolSource, _Mapping]] = ..., input: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., output: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., status: _Optional[_Union[_common_pb2.ToolCallStatus, str]] = ..., error: _Optional[str] = ..., duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., child_run_ids: _Optional[_Iterable[str]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., complete_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class RunTreeNode(_message.Message):
    __slots__ = ("run_id", "parent_run_id", "agent_name", "status", "depth", "step_count", "total_steps", "tokens_in", "tokens_out", "tokens_total_tree", "duration", "summary_preview", "create_time", "waiting_for", "cost_nanos", "cost_total_tree_nanos", "remote", "started_by", "trigger_origin", "chain_depth")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_NAME_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    STEP_COUNT_FIELD_NUMBER: _ClassVar[int]
    TOTAL_STEPS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_IN_FIELD_NUMBER: _ClassVar[int]
    TOKENS_OUT_FIELD_NUMBER: _ClassVar[int]
    TOKENS_TOTAL_TREE_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_PREVIEW_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    WAITING_FOR_FIELD_NUMBER: _ClassVar[int]
    COST_NANOS_FIELD_NUMBER: _ClassVar[int]
    COST_TOTAL_TREE_NANOS_FIELD_NUMBER: _ClassVar[int]
    REMOTE_FIELD_NUMBER: _ClassVar[int]
    STARTED_BY_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_ORIGIN_FIELD_NUMBER: _ClassVar[int]
    CHAIN_DEPTH_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    parent_run_id: str
    agent_name: str
    status: _common_pb2.RunStatus
    depth: int
    step_count: int
    total_steps: int
    tokens_in: int
    tokens_out: int
    tokens_total_tree: int
    duration: _duration_pb2.Duration
    summary_preview: str
    create_time: _timestamp_pb2.Timestamp
    waiting_for: _common_pb2.RunWaitingFor
    cost_nanos: int
    cost_total_tree_nanos: int
    remote: _common_pb2.RemoteRun
    started_by: str
    trigger_origin: _struct_pb2.Struct
    chain_depth: int
    def __init__(self, run_id: _Optional[str] = ..., parent_run_id: _Optional[str] = ..., agent_name: _Optional[str] = ..., status: _Optional[_Union[_common_pb2.RunStatus, str]] = ..., depth: _Optional[int] = ..., step_count: _Optional[int] = ..., total_steps: _Optional[int] = ..., tokens_in: _Optional[int] = ..., tokens_out: _Optional[int] = ..., tokens_total_tree: _Optional[int] = ..., duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., summary_preview: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., waiting_for: _Optional[_Union[_common_pb2.RunWaitingFor, _Mapping]] = ..., cost_nanos: _Optional[int] = ..., cost_total_tree_nanos: _Optional[int] = ..., remote: _Optional[_Union[_common_pb2.RemoteRun, _Mapping]] = ..., started_by: _Optional[str] = ..., trigger_origin: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., chain_depth: _Optional[int] = ...) -> None: ...

class AgentStats(_message.Message):
    __slots__ = ("agent_name", "window_start", "window_end", "total_runs", "queued", "running", "completed", "failed", "cancelled", "paused", "success_rate", "p50_duration", "p95_duration", "tokens_in", "tokens_out", "mean_steps", "resumes", "task_retries", "cost_nanos", "p50_step_duration", "p95_step_duration", "p50_model_call_duration", "p95_model_call_duration", "latency_runs")
    AGENT_NAME_FIELD_NUMBER: _ClassVar[int]
    WINDOW_START_FIELD_NUMBER: _ClassVar[int]
    WINDOW_END_FIELD_NUMBER: _ClassVar[int]
    TOTAL_RUNS_FIELD_NUMBER: _ClassVar[int]
    QUEUED_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    SUCCESS_RATE_FIELD_NUMBER: _ClassVar[int]
    P50_DURATION_FIELD_NUMBER: _ClassVar[int]
    P95_DURATION_FIELD_NUMBER: _ClassVar[int]
    TOKENS_IN_FIELD_NUMBER: _ClassVar[int]
    TOKENS_OUT_FIELD_NUMBER: _ClassVar[int]
    MEAN_STEPS_FIELD_NUMBER: _ClassVar[int]
    RESUMES_FIELD_NUMBER: _ClassVar[int]
    TASK_RETRIES_FIELD_NUMBER: _ClassVar[int]
    COST_NANOS_FIELD_NUMBER: _ClassVar[int]
    P50_STEP_DURATION_FIELD_NUMBER: _ClassVar[int]
    P95_STEP_DURATION_FIELD_NUMBER: _ClassVar[int]
    P50_MODEL_CALL_DURATION_FIELD_NUMBER: _ClassVar[int]
    P95_MODEL_CALL_DURATION_FIELD_NUMBER: _ClassVar[int]
    LATENCY_RUNS_FIELD_NUMBER: _ClassVar[int]
    agent_name: str
    window_start: _timestamp_pb2.Timestamp
    window_end: _timestamp_pb2.Timestamp
    total_runs: int
    queued: int
    running: int
    completed: int
    failed: int
    cancelled: int
    paused: int
    success_rate: float
    p50_duration: _duration_pb2.Duration
    p95_duration: _duration_pb2.Duration
    tokens_in: int
    tokens_out: int
    mean_steps: float
    resumes: int
    task_retries: int
    cost_nanos: int
    p50_step_duration: _duration_pb2.Duration
    p95_step_duration: _duration_pb2.Duration
    p50_model_call_duration: _duration_pb2.Duration
    p95_model_call_duration: _duration_pb2.Duration
    latency_runs: int
    def __init__(self, agent_name: _Optional[str] = ..., window_start: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., window_end: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., total_runs: _Optional[int] = ..., queued: _Optional[int] = ..., running: _Optional[int] = ..., completed: _Optional[int] = ..., failed: _Optional[int] = ..., cancelled: _Optional[int] = ..., paused: _Optional[int] = ..., success_rate: _Optional[float] = ..., p50_duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., p95_duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., tokens_in: _Optional[int] = ..., tokens_out: _Optional[int] = ..., mean_steps: _Optional[float] = ..., resumes: _Optional[int] = ..., task_retries: _Optional[int] = ..., cost_nanos: _Optional[int] = ..., p50_step_duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., p95_step_duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., p50_model_call_duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., p95_model_call_duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., latency_runs: _Optional[int] = ...) -> None: ...

class ListRunsRequest(_message.Message):
    __slots__ = ("project_id", "page_size", "page_token", "agent_name", "statuses", "parent_run_id", "root_run_id", "top_level_only", "created_after", "created_before", "include_internal_agents", "task_id", "thread_id", "started_by", "labels")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    AGENT_NAME_FIELD_NUMBER: _ClassVar[int]
    STATUSES_FIELD_NUMBER: _ClassVar[int]
    PARENT_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ROOT_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TOP_LEVEL_ONLY_FIELD_NUMBER: _ClassVar[int]
    CREATED_AFTER_FIELD_NUMBER: _ClassVar[int]
    CREATED_BEFORE_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_INTERNAL_AGENTS_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    STARTED_BY_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    page_size: int
    page_token: str
    agent_name: str
    statuses: _containers.RepeatedScalarFieldContainer[_common_pb2.RunStatus]
    parent_run_id: str
    root_run_id: str
    top_level_only: bool
    created_after: _timestamp_pb2.Timestamp
    created_before: _timestamp_pb2.Timestamp
    include_internal_agents: bool
    task_id: str
    thread_id: str
    started_by: str
    labels: _containers.ScalarMap[str, str]
    def __init__(self, project_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., agent_name: _Optional[str] = ..., statuses: _Optional[_Iterable[_Union[_common_pb2.RunStatus, str]]] = ..., parent_run_id: _Optional[str] = ..., root_run_id: _Optional[str] = ..., top_level_only: _Optional[bool] = ..., created_after: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., created_before: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., include_internal_agents: _Optional[bool] = ..., task_id: _Optional[str] = ..., thread_id: _Optional[str] = ..., started_by: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ListRunsResponse(_message.Message):
    __slots__ = ("runs", "next_page_token")
    RUNS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[RunSummary]
    next_page_token: str
    def __init__(self, runs: _Optional[_Iterable[_Union[RunSummary, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class GetRunRequest(_message.Message):
    __slots__ = ("project_id", "run_id")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    run_id: str
    def __init__(self, project_id: _Optional[str] = ..., run_id: _Optional[str] = ...) -> None: ...

class GetRunResponse(_message.Message):
    __slots__ = ("run", "agent", "parent", "children", "message_count", "tool_call_count", "last_event_seq")
    RUN_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    PARENT_FIELD_NUMBER: _ClassVar[int]
    CHILDREN_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_COUNT_FIELD_NUMBER: _ClassVar[int]
    LAST_EVENT_SEQ_FIELD_NUMBER: _ClassVar[int]
    run: _common_pb2.AgentRun
    agent: _common_pb2.AgentSummary
    parent: RunSummary
    children: _containers.RepeatedCompositeFieldContainer[RunSummary]
    message_count: int
    tool_call_count: int
    last_event_seq: int
    def __init__(self, run: _Optional[_Union[_common_pb2.AgentRun, _Mapping]] = ..., agent: _Optional[_Union[_common_pb2.AgentSummary, _Mapping]] = ..., parent: _Optional[_Union[RunSummary, _Mapping]] = ..., children: _Optional[_Iterable[_Union[RunSummary, _Mapping]]] = ..., message_count: _Optional[int] = ..., tool_call_count: _Optional[int] = ..., last_event_seq: _Optional[int] = ...) -> None: ...

class ListRunMessagesRequest(_message.Message):
    __slots__ = ("project_id", "page_size", "page_token", "run_id", "roles", "include_internal", "preview_chars")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_INTERNAL_FIELD_NUMBER: _ClassVar[int]
    PREVIEW_CHARS_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    page_size: int
    page_token: str
    run_id: str
    roles: _containers.RepeatedScalarFieldContainer[_common_pb2.MessageRole]
    include_internal: bool
    preview_chars: int
    def __init__(self, project_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., run_id: _Optional[str] = ..., roles: _Optional[_Iterable[_Union[_common_pb2.MessageRole, str]]] = ..., include_internal: _Optional[bool] = ..., preview_chars: _Optional[int] = ...) -> None: ...

class ListRunMessagesResponse(_message.Message):
    __slots__ = ("messages", "next_page_token")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[MessageSummary]
    next_page_token: str
    def __init__(self, messages: _Optional[_Iterable[_Union[MessageSummary, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class GetRunMessageRequest(_message.Message):
    __slots__ = ("project_id", "run_id", "message_id")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    run_id: str
    message_id: str
    def __init__(self, project_id: _Optional[str] = ..., run_id: _Optional[str] = ..., message_id: _Optional[str] = ...) -> None: ...

class GetRunMessageResponse(_message.Message):
    __slots__ = ("message",)
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    message: RunMessage
    def __init__(self, message: _Optional[_Union[RunMessage, _Mapping]] = ...) -> None: ...

class ListRunToolCallsRequest(_message.Message):
    __slots__ = ("project_id", "page_size", "page_token", "run_id", "tool_name", "statuses", "include_internal")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    STATUSES_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_INTERNAL_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    page_size: int
    page_token: str
    run_id: str
    tool_name: str
    statuses: _containers.RepeatedScalarFieldContainer[_common_pb2.ToolCallStatus]
    include_internal: bool
    def __init__(self, project_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., run_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., statuses: _Optional[_Iterable[_Union[_common_pb2.ToolCallStatus, str]]] = ..., include_internal: _Optional[bool] = ...) -> None: ...

class ListRunToolCallsResponse(_message.Message):
    __slots__ = ("tool_calls", "next_page_token")
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tool_calls: _containers.RepeatedCompositeFieldContainer[ToolCallSummary]
    next_page_token: str
    def __init__(self, tool_calls: _Optional[_Iterable[_Union[ToolCallSummary, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class GetRunToolCallRequest(_message.Message):
    __slots__ = ("project_id", "run_id", "tool_call_id")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    run_id: str
    tool_call_id: str
    def __init__(self, project_id: _Optional[str] = ..., run_id: _Optional[str] = ..., tool_call_id: _Optional[str] = ...) -> None: ...

class GetRunToolCallResponse(_message.Message):
    __slots__ = ("tool_call",)
    TOOL_CALL_FIELD_NUMBER: _ClassVar[int]
    tool_call: ToolCall
    def __init__(self, tool_call: _Optional[_Union[ToolCall, _Mapping]] = ...) -> None: ...

class WatchRunRequest(_message.Message):
    __slots__ = ("project_id", "run_id", "after_seq", "include_internal", "include_descendants", "descendant_after_seq")
    class DescendantAfterSeqEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_INTERNAL_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_DESCENDANTS_FIELD_NUMBER: _ClassVar[int]
    DESCENDANT_AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    run_id: str
    after_seq: int
    include_internal: bool
    include_descendants: bool
    descendant_after_seq: _containers.ScalarMap[str, int]
    def __init__(self, project_id: _Optional[str] = ..., run_id: _Optional[str] = ..., after_seq: _Optional[int] = ..., include_internal: _Optional[bool] = ..., include_descendants: _Optional[bool] = ..., descendant_after_seq: _Optional[_Mapping[str, int]] = ...) -> None: ...

class GetRunTreeRequest(_message.Message):
    __slots__ = ("project_id", "run_id")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    run_id: str
    def __init__(self, project_id: _Optional[str] = ..., run_id: _Optional[str] = ...) -> None: ...

class GetRunTreeResponse(_message.Message):
    __slots__ = ("root_run_id", "nodes", "tokens_total", "cost_total_nanos")
    ROOT_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    TOKENS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    COST_TOTAL_NANOS_FIELD_NUMBER: _ClassVar[int]
    root_run_id: str
    nodes: _containers.RepeatedCompositeFieldContainer[RunTreeNode]
    tokens_total: int
    cost_total_nanos: int
    def __init__(self, root_run_id: _Optional[str] = ..., nodes: _Optional[_Iterable[_Union[RunTreeNode, _Mapping]]] = ..., tokens_total: _Optional[int] = ..., cost_total_nanos: _Optional[int] = ...) -> None: ...

class GetAgentStatsRequest(_message.Message):
    __slots__ = ("project_id", "agent_name", "window", "end_time", "include_internal_agents")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_NAME_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_INTERNAL_AGENTS_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    agent_name: str
    window: _duration_pb2.Duration
    end_time: _timestamp_pb2.Timestamp
    include_internal_agents: bool
    def __init__(self, project_id: _Optional[str] = ..., agent_name: _Optional[str] = ..., window: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., include_internal_agents: _Optional[bool] = ...) -> None: ...

class GetAgentStatsResponse(_message.Message):
    __slots__ = ("stats",)
    STATS_FIELD_NUMBER: _ClassVar[int]
    stats: _containers.RepeatedCompositeFieldContainer[AgentStats]
    def __init__(self, stats: _Optional[_Iterable[_Union[AgentStats, _Mapping]]] = ...) -> None: ...
