import datetime

from agentfleet.v1 import common_pb2 as _common_pb2
from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ToolCallDecision(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOOL_CALL_DECISION_UNSPECIFIED: _ClassVar[ToolCallDecision]
    TOOL_CALL_DECISION_APPROVE: _ClassVar[ToolCallDecision]
    TOOL_CALL_DECISION_REJECT: _ClassVar[ToolCallDecision]
TOOL_CALL_DECISION_UNSPECIFIED: ToolCallDecision
TOOL_CALL_DECISION_APPROVE: ToolCallDecision
TOOL_CALL_DECISION_REJECT: ToolCallDecision

class StartRunRequest(_message.Message):
    __slots__ = ("project_id", "agent_name", "input", "max_steps", "timeout", "labels", "request_id", "task_id", "include_internal", "thread_id", "max_tree_cost_nanos")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_NAME_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    MAX_STEPS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_INTERNAL_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_TREE_COST_NANOS_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    agent_name: str
    input: str
    max_steps: int
    timeout: _duration_pb2.Duration
    labels: _containers.ScalarMap[str, str]
    request_id: str
    task_id: str
    include_internal: bool
    thread_id: str
    max_tree_cost_nanos: int
    def __init__(self, project_id: _Optional[str] = ..., agent_name: _Optional[str] = ..., input: _Optional[str] = ..., max_steps: _Optional[int] = ..., timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., labels: _Optional[_Mapping[str, str]] = ..., request_id: _Optional[str] = ..., task_id: _Optional[str] = ..., include_internal: _Optional[bool] = ..., thread_id: _Optional[str] = ..., max_tree_cost_nanos: _Optional[int] = ...) -> None: ...

class CancelRunRequest(_message.Message):
    __slots__ = ("project_id", "run_id", "reason")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    run_id: str
    reason: str
    def __init__(self, project_id: _Optional[str] = ..., run_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class CancelRunResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: _common_pb2.AgentRun
    def __init__(self, run: _Optional[_Union[_common_pb2.AgentRun, _Mapping]] = ...) -> None: ...

class ResumeRunRequest(_message.Message):
    __slots__ = ("project_id", "run_id", "input", "max_steps", "timeout", "request_id", "include_internal")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    MAX_STEPS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_INTERNAL_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    run_id: str
    input: str
    max_steps: int
    timeout: _duration_pb2.Duration
    request_id: str
    include_internal: bool
    def __init__(self, project_id: _Optional[str] = ..., run_id: _Optional[str] = ..., input: _Optional[str] = ..., max_steps: _Optional[int] = ..., timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., request_id: _Optional[str] = ..., include_internal: _Optional[bool] = ...) -> None: ...

class DecideToolCallRequest(_message.Message):
    __slots__ = ("project_id", "run_id", "tool_call_id", "decision", "reason", "arguments", "request_id")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    run_id: str
    tool_call_id: str
    decision: ToolCallDecision
    reason: str
    arguments: _struct_pb2.Struct
    request_id: str
    def __init__(self, project_id: _Optional[str] = ..., run_id: _Optional[str] = ..., tool_call_id: _Optional[str] = ..., decision: _Optional[_Union[ToolCallDecision, str]] = ..., reason: _Optional[str] = ..., arguments: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., request_id: _Optional[str] = ...) -> None: ...

class DecideToolCallResponse(_message.Message):
    __slots__ = ("run", "status", "waiting_tool_call_ids")
    RUN_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    WAITING_TOOL_CALL_IDS_FIELD_NUMBER: _ClassVar[int]
    run: _common_pb2.AgentRun
    status: _common_pb2.ToolCallStatus
    waiting_tool_call_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, run: _Optional[_Union[_common_pb2.AgentRun, _Mapping]] = ..., status: _Optional[_Union[_common_pb2.ToolCallStatus, str]] = ..., waiting_tool_call_ids: _Optional[_Iterable[str]] = ...) -> None: ...
