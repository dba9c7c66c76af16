import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RunStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUN_STATUS_UNSPECIFIED: _ClassVar[RunStatus]
    RUN_STATUS_QUEUED: _ClassVar[RunStatus]
    RUN_STATUS_RUNNING: _ClassVar[RunStatus]
    RUN_STATUS_COMPLETED: _ClassVar[RunStatus]
    RUN_STATUS_FAILED: _ClassVar[RunStatus]
    RUN_STATUS_CANCELLED: _ClassVar[RunStatus]
    RUN_STATUS_PAUSED: _ClassVar[RunStatus]
    RUN_STATUS_WAITING: _ClassVar[RunStatus]

class FlowType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FLOW_TYPE_UNSPECIFIED: _ClassVar[FlowType]
    FLOW_TYPE_SINGLE: _ClassVar[FlowType]
    FLOW_TYPE_SEQUENTIAL: _ClassVar[FlowType]
    FLOW_TYPE_LOOP: _ClassVar[FlowType]
    FLOW_TYPE_PARALLEL: _ClassVar[FlowType]

class Visibility(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    VISIBILITY_UNSPECIFIED: _ClassVar[Visibility]
    VISIBILITY_EXTERNAL: _ClassVar[Visibility]
    VISIBILITY_PROJECT: _ClassVar[Visibility]
    VISIBILITY_INTERNAL: _ClassVar[Visibility]

class MessageRole(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MESSAGE_ROLE_UNSPECIFIED: _ClassVar[MessageRole]
    MESSAGE_ROLE_SYSTEM: _ClassVar[MessageRole]
    MESSAGE_ROLE_USER: _ClassVar[MessageRole]
    MESSAGE_ROLE_MODEL: _ClassVar[MessageRole]
    MESSAGE_ROLE_TOOL: _ClassVar[MessageRole]

class ToolCallStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOOL_CALL_STATUS_UNSPECIFIED: _ClassVar[ToolCallStatus]
    TOOL_CALL_STATUS_STARTED: _ClassVar[ToolCallStatus]
    TOOL_CALL_STATUS_COMPLETED: _ClassVar[ToolCallStatus]
    TOOL_CALL_STATUS_FAILED: _ClassVar[ToolCallStatus]
    TOOL_CALL_STATUS_REFUSED: _ClassVar[ToolCallStatus]
    TOOL_CALL_STATUS_INTERRUPTED: _ClassVar[ToolCallStatus]
    TOOL_CALL_STATUS_AWAITING_APPROVAL: _ClassVar[ToolCallStatus]
    TOOL_CALL_STATUS_APPROVED: _ClassVar[ToolCallStatus]
    TOOL_CALL_STATUS_REJECTED: _ClassVar[ToolCallStatus]

class ToolSourceKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOOL_SOURCE_KIND_UNSPECIFIED: _ClassVar[ToolSourceKind]
    TOOL_SOURCE_KIND_BUILTIN: _ClassVar[ToolSourceKind]
    TOOL_SOURCE_KIND_MCP: _ClassVar[ToolSourceKind]
    TOOL_SOURCE_KIND_EXECUTOR: _ClassVar[ToolSourceKind]

class RunEventType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUN_EVENT_TYPE_UNSPECIFIED: _ClassVar[RunEventType]
    RUN_EVENT_TYPE_RUN_QUEUED: _ClassVar[RunEventType]
    RUN_EVENT_TYPE_RUN_STARTED: _ClassVar[RunEventType]
    RUN_EVENT_TYPE_MODEL_TEXT: _ClassVar[RunEventType]
    RUN_EVENT_TYPE_TOOL_REQUEST: _ClassVar[RunEventType]
    RUN_EVENT_TYPE_TOOL_RESPONSE: _ClassVar[RunEventType]
    RUN_EVENT_TYPE_CHILD_RUN_STARTED: _ClassVar[RunEventType]
    RUN_EVENT_TYPE_CHILD_RUN_FINISHED: _ClassVar[RunEventType]
    RUN_EVENT_TYPE_SAFETY: _ClassVar[RunEventType]
    RUN_EVENT_TYPE_STATUS_CHANGED: _ClassVar[RunEventType]
    RUN_EVENT_TYPE_RUN_FINISHED: _ClassVar[RunEventType]
    RUN_EVENT_TYPE_MODEL_TEXT_DELTA: _ClassVar[RunEventType]
    RUN_EVENT_TYPE_MODEL_QUOTA_WAIT: _ClassVar[RunEventType]
    RUN_EVENT_TYPE_REMOTE_STATUS: _ClassVar[RunEventType]

class SafetyKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SAFETY_KIND_UNSPECIFIED: _ClassVar[SafetyKind]
    SAFETY_KIND_STEP_LIMIT: _ClassVar[SafetyKind]
    SAFETY_KIND_TIMEOUT: _ClassVar[SafetyKind]
    SAFETY_KIND_DOOM_LOOP_WARNING: _ClassVar[SafetyKind]
    SAFETY_KIND_DOOM_LOOP_STOP: _ClassVar[SafetyKind]
    SAFETY_KIND_DEPTH_REFUSAL: _ClassVar[SafetyKind]
    SAFETY_KIND_TOKEN_BUDGET: _ClassVar[SafetyKind]
    SAFETY_KIND_TOTAL_STEP_CAP: _ClassVar[SafetyKind]
    SAFETY_KIND_TOOL_NOT_ALLOWED: _ClassVar[SafetyKind]
    SAFETY_KIND_CALL_AFTER_SOFT_STOP: _ClassVar[SafetyKind]
    SAFETY_KIND_APPROVAL_REQUIRED: _ClassVar[SafetyKind]
    SAFETY_KIND_APPROVAL_DEADLINE: _ClassVar[SafetyKind]
    SAFETY_KIND_MODEL_FALLBACK: _ClassVar[SafetyKind]
    SAFETY_KIND_BUDGET_WARNING: _ClassVar[SafetyKind]
    SAFETY_KIND_BUDGET_STOP: _ClassVar[SafetyKind]
RUN_STATUS_UNSPECIFIED: RunStatus
RUN_STATUS_QUEUED: RunStatus
RUN_STATUS_RUNNING: RunStatus
RUN_STATUS_COMPLETED: RunStatus
RUN_STATUS_FAILED: RunStatus
RUN_STATUS_CANCELLED: RunStatus
RUN_STATUS_PAUSED: RunStatus
RUN_STATUS_WAITING: RunStatus
FLOW_TYPE_UNSPECIFIED: FlowType
FLOW_TYPE_SINGLE: FlowType
FLOW_TYPE_SEQUENTIAL: FlowType
FLOW_TYPE_LOOP: FlowType
FLOW_TYPE_PARALLEL: FlowType
VISIBILITY_UNSPECIFIED: Visibility
VISIBILITY_EXTERNAL: Visibility
VISIBILITY_PROJECT: Visibility
VISIBILITY_INTERNAL: Visibility
MESSAGE_ROLE_UNSPECIFIED: MessageRole
MESSAGE_ROLE_SYSTEM: MessageRole
MESSAGE_ROLE_USER: MessageRole
MESSAGE_ROLE_MODEL: MessageRole
MESSAGE_ROLE_TOOL: MessageRole
TOOL_CALL_STATUS_UNSPECIFIED: ToolCallStatus
TOOL_CALL_STATUS_STARTED: ToolCallStatus
TOOL_CALL_STATUS_COMPLETED: ToolCallStatus
TOOL_CALL_STATUS_FAILED: ToolCallStatus
TOOL_CALL_STATUS_REFUSED: ToolCallStatus
TOOL_CALL_STATUS_INTERRUPTED: ToolCallStatus
TOOL_CALL_STATUS_AWAITING_APPROVAL: ToolCallStatus
TOOL_CALL_STATUS_APPROVED: ToolCallStatus
TOOL_CALL_STATUS_REJECTED: ToolCallStatus
TOOL_SOURCE_KIND_UNSPECIFIED: ToolSourceKind
TOOL_SOURCE_KIND_BUILTIN: ToolSourceKind
TOOL_SOURCE_KIND_MCP: ToolSourceKind
TOOL_SOURCE_KIND_EXECUTOR: ToolSourceKind
RUN_EVENT_TYPE_UNSPECIFIED: RunEventType
RUN_EVENT_TYPE_RUN_QUEUED: RunEventType
RUN_EVENT_TYPE_RUN_STARTED: RunEventType
RUN_EVENT_TYPE_MODEL_TEXT: RunEventType
RUN_EVENT_TYPE_TOOL_REQUEST: RunEventType
RUN_EVENT_TYPE_TOOL_RESPONSE: RunEventType
RUN_EVENT_TYPE_CHILD_RUN_STARTED: RunEventType
RUN_EVENT_TYPE_CHILD_RUN_FINISHED: RunEventType
RUN_EVENT_TYPE_SAFETY: RunEventType
RUN_EVENT_TYPE_STATUS_CHANGED: RunEventType
RUN_EVENT_TYPE_RUN_FINISHED: RunEventType
RUN_EVENT_TYPE_MODEL_TEXT_DELTA: RunEventType
RUN_EVENT_TYPE_MODEL_QUOTA_WAIT: RunEventType
RUN_EVENT_TYPE_REMOTE_STATUS: RunEventType
SAFETY_KIND_UNSPECIFIED: SafetyKind
SAFETY_KIND_STEP_LIMIT: SafetyKind
SAFETY_KIND_TIMEOUT: SafetyKind
SAFETY_KIND_DOOM_LOOP_WARNING: SafetyKind
SAFETY_KIND_DOOM_LOOP_STOP: SafetyKind
SAFETY_KIND_DEPTH_REFUSAL: SafetyKind
SAFETY_KIND_TOKEN_BUDGET: SafetyKind
SAFETY_KIND_TOTAL_STEP_CAP: SafetyKind
SAFETY_KIND_TOOL_NOT_ALLOWED: SafetyKind
SAFETY_KIND_CALL_AFTER_SOFT_STOP: SafetyKind
SAFETY_KIND_APPROVAL_REQUIRED: SafetyKind
SAFETY_KIND_APPROVAL_DEADLINE: SafetyKind
SAFETY_KIND_MODEL_FALLBACK: SafetyKind
SAFETY_KIND_BUDGET_WARNING: SafetyKind
SAFETY_KIND_BUDGET_STOP: SafetyKind

class ToolSource(_message.Message):
    __slots__ = ("kind", "mcp_server")
    KIND_FIELD_NUMBER: _ClassVar[int]
    MCP_SERVER_FIELD_NUMBER: _ClassVar[int]
    kind: ToolSourceKind
    mcp_server: str
    def __init__(self, kind: _Optional[_Union[ToolSourceKind, str]] = ..., mcp_server: _Optional[str] = ...) -> None: ...

class ModelConfig(_message.Message):
    __slots__ = ("provider", "name", "temperature", "max_output_tokens", "extra", "fallback_models", "fallback_wait_s")
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    EXTRA_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_MODELS_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_WAIT_S_FIELD_NUMBER: _ClassVar[int]
    provider: str
    name: str
    temperature: float
    max_output_tokens: int
    extra: _struct_pb2.Struct
    fallback_models: _containers.RepeatedScalarFieldContainer[str]
    fallback_wait_s: float
    def __init__(self, provider: _Optional[str] = ..., name: _Optional[str] = ..., temperature: _Optional[float] = ..., max_output_tokens: _Optional[int] = ..., extra: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., fallback_models: _Optional[_Iterable[str]] = ..., fallback_wait_s: _Optional[float] = ...) -> None: ...

class AgentDefinition(_message.Message):
    __slots__ = ("id", "project_id", "name", "description", "system_prompt", "model", "tools", "flow_type", "sub_agents", "max_iterations", "max_steps", "default_timeout", "visibility", "is_default", "tags", "trigger", "config", "product_name", "version", "create_time", "update_time", "output_schema", "streaming")
    ID_FIELD_NUMBER: _ClassVar[int]
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_PROMPT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    FLOW_TYPE_FIELD_NUMBER: _ClassVar[int]
    SUB_AGENTS_FIELD_NUMBER: _ClassVar[int]
    MAX_ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    MAX_STEPS_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    VISIBILITY_FIELD_NUMBER: _ClassVar[int]
    IS_DEFAULT_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    PRODUCT_NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    STREAMING_FIELD_NUMBER: _ClassVar[int]
    id: str
    project_id: str
    name: str
    description: str
    system_prompt: str
    model: ModelConfig
    tools: _containers.RepeatedScalarFieldContainer[str]
    flow_type: FlowType
    sub_agents: _containers.RepeatedScalarFieldContainer[str]
    max_iterations: int
    max_steps: int
    default_timeout: _duration_pb2.Duration
    visibility: Visibility
    is_default: bool
    tags: _containers.RepeatedScalarFieldContainer[str]
    trigger: str
    config: _struct_pb2.Struct
    product_name: str
    version: int
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    output_schema: _struct_pb2.Struct
    streaming: bool
    def __init__(self, id: _Optional[str] = ..., project_id: _Optional[str] = ..., name: _Optional[str] = ..., description: _Optional[str] = ..., system_prompt: _Optional[str] = ..., model: _Optional[_Union[ModelConfig, _Mapping]] = ..., tools: _Optional[_Iterable[str]] = ..., flow_type: _Optional[_Union[FlowType, str]] = ..., sub_agents: _Optional[_Iterable[str]] = ..., max_iterations: _Optional[int] = ..., max_steps: _Optional[int] = ..., default_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., visibility: _Optional[_Union[Visibility, str]] = ..., is_default: _Optional[bool] = ..., tags: _Optional[_Iterable[str]] = ..., trigger: _Optional[str] = ..., config: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., product_name: _Optional[str] = ..., version: _Optional[int] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., output_schema: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., streaming: _Optional[bool] = ...) -> None: ...

class AgentSummary(_message.Message):
    __slots__ = ("name", "description", "flow_type", "visibility", "tools", "model_name", "product_name", "exists")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    FLOW_TYPE_FIELD_NUMBER: _ClassVar[int]
    VISIBILITY_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    PRODUCT_NAME_FIELD_NUMBER: _ClassVar[int]
    EXISTS_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    flow_type: FlowType
    visibility: Visibility
    tools: _containers.RepeatedScalarFieldContainer[str]
    model_name: str
    product_name: str
    exists: bool
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., flow_type: _Optional[_Union[FlowType, str]] = ..., visibility: _Optional[_Union[Visibility, str]] = ..., tools: _Optional[_Iterable[str]] = ..., model_name: _Optional[str] = ..., product_name: _Optional[str] = ..., exists: _Optional[bool] = ...) -> None: ...

class AgentRun(_message.Message):
    __slots__ = ("id", "project_id", "agent_definition_id", "agent_name", "status", "input", "summary", "error_message", "parent_run_id", "root_run_id", "depth", "step_count", "total_steps", "resume_count", "max_steps", "timeout", "tokens_in", "tokens_out", "tokens_total_tree", "max_tokens", "trace_id", "task_id", "request_id", "labels", "create_time", "start_time", "complete_time", "duration", "cancel_request_time", "output", "thread_id", "cost_nanos", "cost_total_tree_nanos", "max_tree_cost_nanos", "waiting_for", "remote", "started_by", "trigger_origin", "chain_depth", "model_name")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_DEFINITION_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_NAME_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PARENT_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ROOT_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    STEP_COUNT_FIELD_NUMBER: _ClassVar[int]
    TOTAL_STEPS_FIELD_NUMBER: _ClassVar[int]
    RESUME_COUNT_FIELD_NUMBER: _ClassVar[int]
    MAX_STEPS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    TOKENS_IN_FIELD_NUMBER: _ClassVar[int]
    TOKENS_OUT_FIELD_NUMBER: _ClassVar[int]
    TOKENS_TOTAL_TREE_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_TIME_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    CANCEL_REQUEST_TIME_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    COST_NANOS_FIELD_NUMBER: _ClassVar[int]
    COST_TOTAL_TREE_NANOS_FIELD_NUMBER: _ClassVar[int]
    MAX_TREE_COST_NANOS_FIELD_NUMBER: _ClassVar[int]
    WAITING_FOR_FIELD_NUMBER: _ClassVar[int]
    REMOTE_FIELD_NUMBER: _ClassVar[int]
    STARTED_BY_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_ORIGIN_FIELD_NUMBER: _ClassVar[int]
    CHAIN_DEPTH_FIELD_NUMBER: _ClassVar[int]
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    id: str
    project_id: str
    agent_definition_id: str
    agent_name: str
    status: RunStatus
    input: str
    summary: str
    error_message: str
    parent_run_id: str
    root_run_id: str
    depth: int
    step_count: int
    total_steps: int
    resume_count: int
    max_steps: int
    timeout: _duration_pb2.Duration
    tokens_in: int
    tokens_out: int
    tokens_total_tree: int
    max_tokens: int
    trace_id: str
    task_id: str
    request_id: str
    labels: _containers.ScalarMap[str, str]
    create_time: _timestamp_pb2.Timestamp
    start_time: _timestamp_pb2.Timestamp
    complete_time: _timestamp_pb2.Timestamp
    duration: _duration_pb2.Duration
    cancel_request_time: _timestamp_pb2.Timestamp
    output: _struct_pb2.Struct
    thread_id: str
    cost_nanos: int
    cost_total_tree_nanos: int
    max_tree_cost_nanos: int
    waiting_for: RunWaitingFor
    remote: RemoteRun
    started_by: str
    trigger_origin: _struct_pb2.Struct
    chain_depth: int
    model_name: str
    def __init__(self, id: _Optional[str] = ..., project_id: _Optional[str] = ..., agent_definition_id: _Optional[str] = ..., agent_name: _Optional[str] = ..., status: _Optional[_Union[RunStatus, str]] = ..., input: _Optional[str] = ..., summary: _Optional[str] = ..., error_message: _Optional[str] = ..., parent_run_id: _Optional[str] = ..., root_run_id: _Optional[str] = ..., depth: _Optional[int] = ..., step_count: _Optional[int] = ..., total_steps: _Optional[int] = ..., resume_count: _Optional[int] = ..., max_steps: _Optional[int] = ..., timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., tokens_in: _Optional[int] = ..., tokens_out: _Optional[int] = ..., tokens_total_tree: _Optional[int] = ..., max_tokens: _Optional[int] = ..., trace_id: _Optional[str] = ..., task_id: _Optional[str] = ..., request_id: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., complete_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., cancel_request_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., output: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., thread_id: _Optional[str] = ..., cost_nanos: _Optional[int] = ..., cost_total_tree_nanos: _Optional[int] = ..., max_tree_cost_nanos: _Optional[int] = ..., waiting_for: _Optional[_Union[RunWaitingFor, _Mapping]] = ..., remote: _Optional[_Union[RemoteRun, _Mapping]] = ..., started_by: _Optional[str] = ..., trigger_origin: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., chain_depth: _Optional[int] = ..., model_name: _Optional[str] = ...) -> None: ...

class RemoteRun(_message.Message):
    __slots__ = ("name", "card_url", "url", "card_name", "task_id", "context_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CARD_URL_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    CARD_NAME_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    card_url: str
    url: str
    card_name: str
    task_id: str
    context_id: str
    def __init__(self, name: _Optional[str] = ..., card_url: _Optional[str] = ..., url: _Optional[str] = ..., card_name: _Optional[str] = ..., task_id: _Optional[str] = ..., context_id: _Optional[str] = ...) -> None: ...

class RunWaitingFor(_message.Message):
    __slots__ = ("message", "model", "limit", "expected_wait", "since")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_WAIT_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    message: str
    model: str
    limit: str
    expected_wait: _duration_pb2.Duration
    since: _timestamp_pb2.Timestamp
    def __init__(self, message: _Optional[str] = ..., model: _Optional[str] = ..., limit: _Optional[str] = ..., expected_wait: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class RunQueued(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: AgentRun
    def __init__(self, run: _Optional[_Union[AgentRun, _Mapping]] = ...) -> None: ...

class RunStarted(_message.Message):
    __slots__ = ("model_name", "tool_names", "recovered", "resumed", "worker")
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAMES_FIELD_NUMBER: _ClassVar[int]
    RECOVERED_FIELD_NUMBER: _ClassVar[int]
    RESUMED_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    model_name: str
    tool_names: _containers.RepeatedScalarFieldContainer[str]
    recovered: bool
    resumed: bool
    worker: str
    def __init__(self, model_name: _Optional[str] = ..., tool_names: _Optional[_Iterable[str]] = ..., recovered: _Optional[bool] = ..., resumed: _Optional[bool] = ..., worker: _Optional[str] = ...) -> None: ...

class ModelText(_message.Message):
    __slots__ = ("text", "step", "thought")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    THOUGHT_FIELD_NUMBER: _ClassVar[int]
    text: str
    step: int
    thought: bool
    def __init__(self, text: _Optional[str] = ..., step: _Optional[int] = ..., thought: _Optional[bool] = ...) -> None: ...

class ModelTextDelta(_message.Message):
    __slots__ = ("text", "step", "thought", "offset", "before_seq")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    THOUGHT_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    BEFORE_SEQ_FIELD_NUMBER: _ClassVar[int]
    text: str
    step: int
    thought: bool
    offset: int
    before_seq: int
    def __init__(self, text: _Optional[str] = ..., step: _Optional[int] = ..., thought: _Optional[bool] = ..., offset: _Optional[int] = ..., before_seq: _Optional[int] = ...) -> None: ...

class ToolRequest(_message.Message):
    __slots__ = ("tool_call_id", "tool_name", "arguments", "step", "source")
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    tool_call_id: str
    tool_name: str
    arguments: _struct_pb2.Struct
    step: int
    source: ToolSource
    def __init__(self, tool_call_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., arguments: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., step: _Optional[int] = ..., source: _Optional[_Union[ToolSource, _Mapping]] = ...) -> None: ...

class ToolResponse(_message.Message):
    __slots__ = ("tool_call_id", "tool_name", "status", "result", "error", "duration", "step")
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    tool_call_id: str
    tool_name: str
    status: ToolCallStatus
    result: _struct_pb2.Struct
    error: str
    duration: _duration_pb2.Duration
    step: int
    def __init__(self, tool_call_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., status: _Optional[_Union[ToolCallStatus, str]] = ..., result: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., error: _Optional[str] = ..., duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., step: _Optional[int] = ...) -> None: ...

class ChildRun(_message.Message):
    __slots__ = ("child_run_id", "agent_name", "status", "summary", "error_message", "description", "tool_call_id")
    CHILD_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_NAME_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    child_run_id: str
    agent_name: str
    status: RunStatus
    summary: str
    error_message: str
    description: str
    tool_call_id: str
    def __init__(self, child_run_id: _Optional[str] = ..., agent_name: _Optional[str] = ..., status: _Optional[_Union[RunStatus, str]] = ..., summary: _Optional[str] = ..., error_message: _Optional[str] = ..., description: _Optional[str] = ..., tool_call_id: _Optional[str] = ...) -> None: ...

class Safety(_message.Message):
    __slots__ = ("kind", "message", "details", "step")
    KIND_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    kind: SafetyKind
    message: str
    details: _struct_pb2.Struct
    step: int
    def __init__(self, kind: _Optional[_Union[SafetyKind, str]] = ..., message: _Optional[str] = ..., details: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., step: _Optional[int] = ...) -> None: ...

class StatusChanged(_message.Message):
    __slots__ = ("from_status", "to_status", "reason")
    FROM_STATUS_FIELD_NUMBER: _ClassVar[int]
    TO_STATUS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    from_status: RunStatus
    to_status: RunStatus
    reason: str
    def __init__(self, from_status: _Optional[_Union[RunStatus, str]] = ..., to_status: _Optional[_Union[RunStatus, str]] = ..., reason: _Optional[str] = ...) -> None: ...

class ModelQuotaWait(_message.Message):
    __slots__ = ("waiting", "model", "limit", "expected_wait", "step", "waited", "message")
    WAITING_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_WAIT_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    WAITED_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    waiting: bool
    model: str
    limit: str
    expected_wait: _duration_pb2.Duration
    step: int
    waited: _duration_pb2.Duration
    message: str
    def __init__(self, waiting: _Optional[bool] = ..., model: _Optional[str] = ..., limit: _Optional[str] = ..., expected_wait: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., step: _Optional[int] = ..., waited: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., message: _Optional[str] = ...) -> None: ...

class RemoteStatus(_message.Message):
    __slots__ = ("state", "task_id", "step")
    STATE_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    state: str
    task_id: str
    step: int
    def __init__(self, state: _Optional[str] = ..., task_id: _Optional[str] = ..., step: _Optional[int] = ...) -> None: ...

class RunFinished(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: AgentRun
    def __init__(self, run: _Optional[_Union[AgentRun, _Mapping]] = ...) -> None: ...

class RunEvent(_message.Message):
    __slots__ = ("run_id", "root_run_id", "parent_run_id", "seq", "agent_name", "type", "is_internal", "create_time", "trace_id", "run_queued", "run_started", "model_text", "tool_request", "tool_response", "child_run", "safety", "status_changed", "run_finished", "model_quota_wait", "remote_status", "model_text_delta")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ROOT_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    AGENT_NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    IS_INTERNAL_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_QUEUED_FIELD_NUMBER: _ClassVar[int]
    RUN_STARTED_FIELD_NUMBER: _ClassVar[int]
    MODEL_TEXT_FIELD_NUMBER: _ClassVar[int]
    TOOL_REQUEST_FIELD_NUMBER: _ClassVar[int]
    TOOL_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    CHILD_RUN_FIELD_NUMBER: _ClassVar[int]
    SAFETY_FIELD_NUMBER: _ClassVar[int]
    STATUS_CHANGED_FIELD_NUMBER: _ClassVar[int]
    RUN_FINISHED_FIELD_NUMBER: _ClassVar[int]
    MODEL_QUOTA_WAIT_FIELD_NUMBER: _ClassVar[int]
    REMOTE_STATUS_FIELD_NUMBER: _ClassVar[int]
    MODEL_TEXT_DELTA_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    root_run_id: str
    parent_run_id: str
    seq: int
    agent_name: str
    type: RunEventType
    is_internal: bool
    create_time: _timestamp_pb2.Timestamp
    trace_id: str
    run_queued: RunQueued
    run_started: RunStarted
    model_text: ModelText
    tool_request: ToolRequest
    tool_response: ToolResponse
    child_run: ChildRun
    safety: Safety
    status_changed: StatusChanged
    run_finished: RunFinished
    model_quota_wait: ModelQuotaWait
    remote_status: RemoteStatus
    model_text_delta: ModelTextDelta
    def __init__(self, run_id: _Optional[str] = ..., root_run_id: _Optional[str] = ..., parent_run_id: _Optional[str] = ..., seq: _Optional[int] = ..., agent_name: _Optional[str] = ..., type: _Optional[_Union[RunEventType, str]] = ..., is_internal: _Optional[bool] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., trace_id: _Optional[str] = ..., run_queued: _Optional[_Union[RunQueued, _Mapping]] = ..., run_started: _Optional[_Union[RunStarted, _Mapping]] = ..., model_text: _Optional[_Union[ModelText, _Mapping]] = ..., tool_request: _Optional[_Union[ToolRequest, _Mapping]] = ..., tool_response: _Optional[_Union[ToolResponse, _Mapping]] = ..., child_run: _Optional[_Union[ChildRun, _Mapping]] = ..., safety: _Optional[_Union[Safety, _Mapping]] = ..., status_changed: _Optional[_Union[StatusChanged, _Mapping]] = ..., run_finished: _Optional[_Union[RunFinished, _Mapping]] = ..., model_quota_wait: _Optional[_Union[ModelQuotaWait, _Mapping]] = ..., remote_status: _Optional[_Union[RemoteStatus, _Mapping]] = ..., model_text_delta: _Optional[_Union[ModelTextDelta, _Mapping]] = ...) -> None: ...
