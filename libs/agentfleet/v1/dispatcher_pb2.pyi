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

class TaskStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TASK_STATUS_UNSPECIFIED: _ClassVar[TaskStatus]
    TASK_STATUS_PENDING: _ClassVar[TaskStatus]
    TASK_STATUS_IN_PROGRESS: _ClassVar[TaskStatus]
    TASK_STATUS_COMPLETED: _ClassVar[TaskStatus]
    TASK_STATUS_FAILED: _ClassVar[TaskStatus]
    TASK_STATUS_PAUSED: _ClassVar[TaskStatus]
    TASK_STATUS_CANCELLED: _ClassVar[TaskStatus]

class TaskGraphStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TASK_GRAPH_STATUS_UNSPECIFIED: _ClassVar[TaskGraphStatus]
    TASK_GRAPH_STATUS_ACTIVE: _ClassVar[TaskGraphStatus]
    TASK_GRAPH_STATUS_COMPLETED: _ClassVar[TaskGraphStatus]
    TASK_GRAPH_STATUS_FAILED: _ClassVar[TaskGraphStatus]
    TASK_GRAPH_STATUS_PAUSED: _ClassVar[TaskGraphStatus]
    TASK_GRAPH_STATUS_CANCELLED: _ClassVar[TaskGraphStatus]

class SelectionMethod(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SELECTION_METHOD_UNSPECIFIED: _ClassVar[SelectionMethod]
    SELECTION_METHOD_ASSIGNED: _ClassVar[SelectionMethod]
    SELECTION_METHOD_TAG_RULE: _ClassVar[SelectionMethod]
    SELECTION_METHOD_LLM: _ClassVar[SelectionMethod]
    SELECTION_METHOD_DEFAULT_AGENT: _ClassVar[SelectionMethod]

class SessionOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SESSION_OUTCOME_UNSPECIFIED: _ClassVar[SessionOutcome]
    SESSION_OUTCOME_IN_PROGRESS: _ClassVar[SessionOutcome]
    SESSION_OUTCOME_COMPLETED: _ClassVar[SessionOutcome]
    SESSION_OUTCOME_FAILED: _ClassVar[SessionOutcome]
    SESSION_OUTCOME_PAUSED: _ClassVar[SessionOutcome]
    SESSION_OUTCOME_CANCELLED: _ClassVar[SessionOutcome]
    SESSION_OUTCOME_REJECTED: _ClassVar[SessionOutcome]

class TaskEventType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TASK_EVENT_TYPE_UNSPECIFIED: _ClassVar[TaskEventType]
    TASK_EVENT_TYPE_SNAPSHOT: _ClassVar[TaskEventType]
    TASK_EVENT_TYPE_TASK_ADDED: _ClassVar[TaskEventType]
    TASK_EVENT_TYPE_TASK_STATUS_CHANGED: _ClassVar[TaskEventType]
    TASK_EVENT_TYPE_GRAPH_STATUS_CHANGED: _ClassVar[TaskEventType]
TASK_STATUS_UNSPECIFIED: TaskStatus
TASK_STATUS_PENDING: TaskStatus
TASK_STATUS_IN_PROGRESS: TaskStatus
TASK_STATUS_COMPLETED: TaskStatus
TASK_STATUS_FAILED: TaskStatus
TASK_STATUS_PAUSED: TaskStatus
TASK_STATUS_CANCELLED: TaskStatus
TASK_GRAPH_STATUS_UNSPECIFIED: TaskGraphStatus
TASK_GRAPH_STATUS_ACTIVE: TaskGraphStatus
TASK_GRAPH_STATUS_COMPLETED: TaskGraphStatus
TASK_GRAPH_STATUS_FAILED: TaskGraphStatus
TASK_GRAPH_STATUS_PAUSED: TaskGraphStatus
TASK_GRAPH_STATUS_CANCELLED: TaskGraphStatus
SELECTION_METHOD_UNSPECIFIED: SelectionMethod
SELECTION_METHOD_ASSIGNED: SelectionMethod
SELECTION_METHOD_TAG_RULE: SelectionMethod
SELECTION_METHOD_LLM: SelectionMethod
SELECTION_METHOD_DEFAULT_AGENT: SelectionMethod
SESSION_OUTCOME_UNSPECIFIED: SessionOutcome
SESSION_OUTCOME_IN_PROGRESS: SessionOutcome
SESSION_OUTCOME_COMPLETED: SessionOutcome
SESSION_OUTCOME_FAILED: SessionOutcome
SESSION_OUTCOME_PAUSED: SessionOutcome
SESSION_OUTCOME_CANCELLED: SessionOutcome
SESSION_OUTCOME_REJECTED: SessionOutcome
TASK_EVENT_TYPE_UNSPECIFIED: TaskEventType
TASK_EVENT_TYPE_SNAPSHOT: TaskEventType
TASK_EVENT_TYPE_TASK_ADDED: TaskEventType
TASK_EVENT_TYPE_TASK_STATUS_CHANGED: TaskEventType
TASK_EVENT_TYPE_GRAPH_STATUS_CHANGED: TaskEventType

class TaskSpec(_message.Message):
    __slots__ = ("key", "title", "description", "assigned_agent", "tags", "priority", "max_retries", "timeout", "properties", "max_resumes")
    KEY_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    ASSIGNED_AGENT_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    MAX_RETRIES_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    MAX_RESUMES_FIELD_NUMBER: _ClassVar[int]
    key: str
    title: str
    description: str
    assigned_agent: str
    tags: _containers.RepeatedScalarFieldContainer[str]
    priority: int
    max_retries: int
    timeout: _duration_pb2.Duration
    properties: _struct_pb2.Struct
    max_resumes: int
    def __init__(self, key: _Optional[str] = ..., title: _Optional[str] = ..., description: _Optional[str] = ..., assigned_agent: _Optional[str] = ..., tags: _Optional[_Iterable[str]] = ..., priority: _Optional[int] = ..., max_retries: _Optional[int] = ..., timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., properties: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., max_resumes: _Optional[int] = ...) -> None: ...

class TaskEdge(_message.Message):
    __slots__ = ("blocker_key", "blocked_key")
    BLOCKER_KEY_FIELD_NUMBER: _ClassVar[int]
    BLOCKED_KEY_FIELD_NUMBER: _ClassVar[int]
    blocker_key: str
    blocked_key: str
    def __init__(self, blocker_key: _Optional[str] = ..., blocked_key: _Optional[str] = ...) -> None: ...

class Task(_message.Message):
    __slots__ = ("id", "task_graph_id", "spec", "status", "attempts", "last_run_id", "summary", "error_message", "blocker_keys", "blocked", "created_by_run_id", "version", "create_time", "update_time", "start_time", "complete_time", "escalated")
    ID_FIELD_NUMBER: _ClassVar[int]
    TASK_GRAPH_ID_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    LAST_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    BLOCKER_KEYS_FIELD_NUMBER: _ClassVar[int]
    BLOCKED_FIELD_NUMBER: _ClassVar[int]
    CREATED_BY_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_TIME_FIELD_NUMBER: _ClassVar[int]
    ESCALATED_FIELD_NUMBER: _ClassVar[int]
    id: str
    task_graph_id: str
    spec: TaskSpec
    status: TaskStatus
    attempts: int
    last_run_id: str
    summary: str
    error_message: str
    blocker_keys: _containers.RepeatedScalarFieldContainer[str]
    blocked: bool
    created_by_run_id: str
    version: int
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    start_time: _timestamp_pb2.Timestamp
    complete_time: _timestamp_pb2.Timestamp
    escalated: bool
    def __init__(self, id: _Optional[str] = ..., task_graph_id: _Optional[str] = ..., spec: _Optional[_Union[TaskSpec, _Mapping]] = ..., status: _Optional[_Union[TaskStatus, str]] = ..., attempts: _Optional[int] = ..., last_run_id: _Optional[str] = ..., summary: _Optional[str] = ..., error_message: _Optional[str] = ..., blocker_keys: _Optional[_Iterable[str]] = ..., blocked: _Optional[bool] = ..., created_by_run_id: _Optional[str] = ..., version: _Optional[int] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., complete_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., escalated: _Optional[bool] = ...) -> None: ...

class TaskCounts(_message.Message):
    __slots__ = ("total", "pending", "in_progress", "completed", "failed", "paused", "cancelled", "blocked")
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    IN_PROGRESS_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    BLOCKED_FIELD_NUMBER: _ClassVar[int]
    total: int
    pending: int
    in_progress: int
    completed: int
    failed: int
    paused: int
    cancelled: int
    blocked: int
    def __init__(self, total: _Optional[int] = ..., pending: _Optional[int] = ..., in_progress: _Optional[int] = ..., completed: _Optional[int] = ..., failed: _Optional[int] = ..., paused: _Optional[int] = ..., cancelled: _Optional[int] = ..., blocked: _Optional[int] = ...) -> None: ...

class TaskGraph(_message.Message):
    __slots__ = ("id", "project_id", "title", "status", "counts", "tasks", "edges", "max_parallel", "labels", "create_time", "update_time", "complete_time", "llm_triage")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    COUNTS_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    EDGES_FIELD_NUMBER: _ClassVar[int]
    MAX_PARALLEL_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_TIME_FIELD_NUMBER: _ClassVar[int]
    LLM_TRIAGE_FIELD_NUMBER: _ClassVar[int]
    id: str
    project_id: str
    title: str
    status: TaskGraphStatus
    counts: TaskCounts
    tasks: _containers.RepeatedCompositeFieldContainer[Task]
    edges: _containers.RepeatedCompositeFieldContainer[TaskEdge]
    max_parallel: int
    labels: _containers.ScalarMap[str, str]
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    complete_time: _timestamp_pb2.Timestamp
    llm_triage: bool
    def __init__(self, id: _Optional[str] = ..., project_id: _Optional[str] = ..., title: _Optional[str] = ..., status: _Optional[_Union[TaskGraphStatus, str]] = ..., counts: _Optional[_Union[TaskCounts, _Mapping]] = ..., tasks: _Optional[_Iterable[_Union[Task, _Mapping]]] = ..., edges: _Optional[_Iterable[_Union[TaskEdge, _Mapping]]] = ..., max_parallel: _Optional[int] = ..., labels: _Optional[_Mapping[str, str]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., complete_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., llm_triage: _Optional[bool] = ...) -> None: ...

class TaskSession(_message.Message):
    __slots__ = ("id", "task_id", "task_key", "attempt", "run_id", "agent_name", "chosen_by", "reason", "outcome", "summary", "error_message", "evaluation", "follows_up_session_id", "informed_by_session_ids", "resume_count", "create_time", "complete_time", "triage_decision", "triage_reason", "message_count", "tokens_in", "tokens_out")
    ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_KEY_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_NAME_FIELD_NUMBER: _ClassVar[int]
    CHOSEN_BY_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    EVALUATION_FIELD_NUMBER: _ClassVar[int]
    FOLLOWS_UP_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    INFORMED_BY_SESSION_IDS_FIELD_NUMBER: _ClassVar[int]
    RESUME_COUNT_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_TIME_FIELD_NUMBER: _ClassVar[int]
    TRIAGE_DECISION_FIELD_NUMBER: _ClassVar[int]
    TRIAGE_REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    TOKENS_IN_FIELD_NUMBER: _ClassVar[int]
    TOKENS_OUT_FIELD_NUMBER: _ClassVar[int]
    id: str
    task_id: str
    task_key: str
    attempt: int
    run_id: str
    agent_name: str
    chosen_by: SelectionMethod
    reason: str
    outcome: SessionOutcome
    summary: str
    error_message: str
    evaluation: str
    follows_up_session_id: str
    informed_by_session_ids: _containers.RepeatedScalarFieldContainer[str]
    resume_count: int
    create_time: _timestamp_pb2.Timestamp
    complete_time: _timestamp_pb2.Timestamp
    triage_decision: str
    triage_reason: str
    message_count: int
    tokens_in: int
    tokens_out: int
    def __init__(self, id: _Optional[str] = ..., task_id: _Optional[str] = ..., task_key: _Optional[str] = ..., attempt: _Optional[int] = ..., run_id: _Optional[str] = ..., agent_name: _Optional[str] = ..., chosen_by: _Optional[_Union[SelectionMethod, str]] = ..., reason: _Optional[str] = ..., outcome: _Optional[_Union[SessionOutcome, str]] = ..., summary: _Optional[str] = ..., error_message: _Optional[str] = ..., evaluation: _Optional[str] = ..., follows_up_session_id: _Optional[str] = ..., informed_by_session_ids: _Optional[_Iterable[str]] = ..., resume_count: _Optional[int] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., complete_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., triage_decision: _Optional[str] = ..., triage_reason: _Optional[str] = ..., message_count: _Optional[int] = ..., tokens_in: _Optional[int] = ..., tokens_out: _Optional[int] = ...) -> None: ...

class TaskEvent(_message.Message):
    __slots__ = ("type", "task_graph_id", "task", "previous_status", "session", "graph_status", "counts", "create_time")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    TASK_GRAPH_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_STATUS_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    GRAPH_STATUS_FIELD_NUMBER: _ClassVar[int]
    COUNTS_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    type: TaskEventType
    task_graph_id: str
    task: Task
    previous_status: TaskStatus
    session: TaskSession
    graph_status: TaskGraphStatus
    counts: TaskCounts
    create_time: _timestamp_pb2.Timestamp
    def __init__(self, type: _Optional[_Union[TaskEventType, str]] = ..., task_graph_id: _Optional[str] = ..., task: _Optional[_Union[Task, _Mapping]] = ..., previous_status: _Optional[_Union[TaskStatus, str]] = ..., session: _Optional[_Union[TaskSession, _Mapping]] = ..., graph_status: _Optional[_Union[TaskGraphStatus, str]] = ..., counts: _Optional[_Union[TaskCounts, _Mapping]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class CreateTaskGraphRequest(_message.Message):
    __slots__ = ("project_id", "title", "tasks", "edges", "max_parallel", "labels", "request_id", "validate_only", "llm_triage")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    EDGES_FIELD_NUMBER: _ClassVar[int]
    MAX_PARALLEL_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    LLM_TRIAGE_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    title: str
    tasks: _containers.RepeatedCompositeFieldContainer[TaskSpec]
    edges: _containers.RepeatedCompositeFieldContainer[TaskEdge]
    max_parallel: int
    labels: _containers.ScalarMap[str, str]
    request_id: str
    validate_only: bool
    llm_triage: bool
    def __init__(self, project_id: _Optional[str] = ..., title: _Optional[str] = ..., tasks: _Optional[_Iterable[_Union[TaskSpec, _Mapping]]] = ..., edges: _Optional[_Iterable[_Union[TaskEdge, _Mapping]]] = ..., max_parallel: _Optional[int] = ..., labels: _Optional[_Mapping[str, str]] = ..., request_id: _Optional[str] = ..., validate_only: _Optional[bool] = ..., llm_triage: _Optional[bool] = ...) -> None: ...

class CreateTaskGraphResponse(_message.Message):
    __slots__ = ("task_graph",)
    TASK_GRAPH_FIELD_NUMBER: _ClassVar[int]
    task_graph: TaskGraph
    def __init__(self, task_graph: _Optional[_Union[TaskGraph, _Mapping]] = ...) -> None: ...

class AddTasksRequest(_message.Message):
    __slots__ = ("project_id", "task_graph_id", "tasks", "edges", "request_id")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_GRAPH_ID_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    EDGES_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    task_graph_id: str
    tasks: _containers.RepeatedCompositeFieldContainer[TaskSpec]
    edges: _containers.RepeatedCompositeFieldContainer[TaskEdge]
    request_id: str
    def __init__(self, project_id: _Optional[str] = ..., task_graph_id: _Optional[str] = ..., tasks: _Optional[_Iterable[_Union[TaskSpec, _Mapping]]] = ..., edges: _Optional[_Iterable[_Union[TaskEdge, _Mapping]]] = ..., request_id: _Optional[str] = ...) -> None: ...

class AddTasksResponse(_message.Message):
    __slots__ = ("tasks", "task_graph")
    TASKS_FIELD_NUMBER: _ClassVar[int]
    TASK_GRAPH_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[Task]
    task_graph: TaskGraph
    def __init__(self, tasks: _Optional[_Iterable[_Union[Task, _Mapping]]] = ..., task_graph: _Optional[_Union[TaskGraph, _Mapping]] = ...) -> None: ...

class GetTaskGraphRequest(_message.Message):
    __slots__ = ("project_id", "task_graph_id")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_GRAPH_ID_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    task_graph_id: str
    def __init__(self, project_id: _Optional[str] = ..., task_graph_id: _Optional[str] = ...) -> None: ...

class GetTaskGraphResponse(_message.Message):
    __slots__ = ("task_graph",)
    TASK_GRAPH_FIELD_NUMBER: _ClassVar[int]
    task_graph: TaskGraph
    def __init__(self, task_graph: _Optional[_Union[TaskGraph, _Mapping]] = ...) -> None: ...

class ListTaskGraphsRequest(_message.Message):
    __slots__ = ("project_id", "page_size", "page_token", "statuses")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    STATUSES_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    page_size: int
    page_token: str
    statuses: _containers.RepeatedScalarFieldContainer[TaskGraphStatus]
    def __init__(self, project_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., statuses: _Optional[_Iterable[_Union[TaskGraphStatus, str]]] = ...) -> None: ...

class ListTaskGraphsResponse(_message.Message):
    __slots__ = ("task_graphs", "next_page_token")
    TASK_GRAPHS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    task_graphs: _containers.RepeatedCompositeFieldContainer[TaskGraph]
    next_page_token: str
    def __init__(self, task_graphs: _Optional[_Iterable[_Union[TaskGraph, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class CancelTaskGraphRequest(_message.Message):
    __slots__ = ("project_id", "task_graph_id", "reason")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_GRAPH_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    task_graph_id: str
    reason: str
    def __init__(self, project_id: _Optional[str] = ..., task_graph_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class CancelTaskGraphResponse(_message.Message):
    __slots__ = ("task_graph",)
    TASK_GRAPH_FIELD_NUMBER: _ClassVar[int]
    task_graph: TaskGraph
    def __init__(self, task_graph: _Optional[_Union[TaskGraph, _Mapping]] = ...) -> None: ...

class RetryTaskRequest(_message.Message):
    __slots__ = ("project_id", "task_id", "feedback")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    FEEDBACK_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    task_id: str
    feedback: str
    def __init__(self, project_id: _Optional[str] = ..., task_id: _Optional[str] = ..., feedback: _Optional[str] = ...) -> None: ...

class RetryTaskResponse(_message.Message):
    __slots__ = ("task",)
    TASK_FIELD_NUMBER: _ClassVar[int]
    task: Task
    def __init__(self, task: _Optional[_Union[Task, _Mapping]] = ...) -> None: ...

class WatchTaskGraphRequest(_message.Message):
    __slots__ = ("project_id", "task_graph_id")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_GRAPH_ID_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    task_graph_id: str
    def __init__(self, project_id: _Optional[str] = ..., task_graph_id: _Optional[str] = ...) -> None: ...

class ListTaskSessionsRequest(_message.Message):
    __slots__ = ("project_id", "page_size", "page_token", "task_id")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    page_size: int
    page_token: str
    task_id: str
    def __init__(self, project_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., task_id: _Optional[str] = ...) -> None: ...

class ListTaskSessionsResponse(_message.Message):
    __slots__ = ("task_sessions", "next_page_token")
    TASK_SESSIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    task_sessions: _containers.RepeatedCompositeFieldContainer[TaskSession]
    next_page_token: str
    def __init__(self, task_sessions: _Optional[_Iterable[_Union[TaskSession, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...
