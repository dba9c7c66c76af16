import datetime

from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EmitEventRequest(_message.Message):
    __slots__ = ("project_id", "name", "payload", "request_id")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    name: str
    payload: _struct_pb2.Struct
    request_id: str
    def __init__(self, project_id: _Optional[str] = ..., name: _Optional[str] = ..., payload: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., request_id: _Optional[str] = ...) -> None: ...

class EmitEventResponse(_message.Message):
    __slots__ = ("event_id", "created")
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    event_id: int
    created: bool
    def __init__(self, event_id: _Optional[int] = ..., created: _Optional[bool] = ...) -> None: ...

class TriggerFiring(_message.Message):
    __slots__ = ("id", "project_id", "event_id", "agent_name", "trigger", "outcome", "reason", "run_id", "object_id", "event_name", "schedule_id", "chain_depth", "create_time")
    ID_FIELD_NUMBER: _ClassVar[int]
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_NAME_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    OBJECT_ID_FIELD_NUMBER: _ClassVar[int]
    EVENT_NAME_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    CHAIN_DEPTH_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    id: str
    project_id: str
    event_id: int
    agent_name: str
    trigger: str
    outcome: str
    reason: str
    run_id: str
    object_id: str
    event_name: str
    schedule_id: str
    chain_depth: int
    create_time: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[str] = ..., project_id: _Optional[str] = ..., event_id: _Optional[int] = ..., agent_name: _Optional[str] = ..., trigger: _Optional[str] = ..., outcome: _Optional[str] = ..., reason: _Optional[str] = ..., run_id: _Optional[str] = ..., object_id: _Optional[str] = ..., event_name: _Optional[str] = ..., schedule_id: _Optional[str] = ..., chain_depth: _Optional[int] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ListTriggerFiringsRequest(_message.Message):
    __slots__ = ("project_id", "page_size", "page_token", "agent_name", "outcome")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    AGENT_NAME_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    page_size: int
    page_token: str
    agent_name: str
    outcome: str
    def __init__(self, project_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., agent_name: _Optional[str] = ..., outcome: _Optional[str] = ...) -> None: ...

class ListTriggerFiringsResponse(_message.Message):
    __slots__ = ("firings", "next_page_token")
    FIRINGS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    firings: _containers.RepeatedCompositeFieldContainer[TriggerFiring]
    next_page_token: str
    def __init__(self, firings: _Optional[_Iterable[_Union[TriggerFiring, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class Schedule(_message.Message):
    __slots__ = ("id", "project_id", "name", "agent_name", "cron", "time_zone", "input", "catch_up", "paused", "next_fire_time", "last_fire_time", "upcoming_fire_times")
    ID_FIELD_NUMBER: _ClassVar[int]
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    AGENT_NAME_FIELD_NUMBER: _ClassVar[int]
    CRON_FIELD_NUMBER: _ClassVar[int]
    TIME_ZONE_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    CATCH_UP_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    NEXT_FIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    LAST_FIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPCOMING_FIRE_TIMES_FIELD_NUMBER: _ClassVar[int]
    id: str
    project_id: str
    name: str
    agent_name: str
    cron: str
    time_zone: str
    input: str
    catch_up: str
    paused: bool
    next_fire_time: _timestamp_pb2.Timestamp
    last_fire_time: _timestamp_pb2.Timestamp
    upcoming_fire_times: _containers.RepeatedCompositeFieldContainer[_timestamp_pb2.Timestamp]
    def __init__(self, id: _Optional[str] = ..., project_id: _Optional[str] = ..., name: _Optional[str] = ..., agent_name: _Optional[str] = ..., cron: _Optional[str] = ..., time_zone: _Optional[str] = ..., input: _Optional[str] = ..., catch_up: _Optional[str] = ..., paused: _Optional[bool] = ..., next_fire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_fire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., upcoming_fire_times: _Optional[_Iterable[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]]] = ...) -> None: ...

class CreateScheduleRequest(_message.Message):
    __slots__ = ("project_id", "schedule")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    schedule: Schedule
    def __init__(self, project_id: _Optional[str] = ..., schedule: _Optional[_Union[Schedule, _Mapping]] = ...) -> None: ...

class CreateScheduleResponse(_message.Message):
    __slots__ = ("schedule",)
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: Schedule
    def __init__(self, schedule: _Optional[_Union[Schedule, _Mapping]] = ...) -> None: ...

class ListSchedulesRequest(_message.Message):
    __slots__ = ("project_id",)
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    def __init__(self, project_id: _Optional[str] = ...) -> None: ...

class ListSchedulesResponse(_message.Message):
    __slots__ = ("schedules",)
    SCHEDULES_FIELD_NUMBER: _ClassVar[int]
    schedules: _containers.RepeatedCompositeFieldContainer[Schedule]
    def __init__(self, schedules: _Optional[_Iterable[_Union[Schedule, _Mapping]]] = ...) -> None: ...

class SetSchedulePausedRequest(_message.Message):
    __slots__ = ("project_id", "name", "paused")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    name: str
    paused: bool
    def __init__(self, project_id: _Optional[str] = ..., name: _Optional[str] = ..., paused: _Optional[bool] = ...) -> None: ...

class SetSchedulePausedResponse(_message.Message):
    __slots__ = ("schedule",)
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: Schedule
    def __init__(self, schedule: _Optional[_Union[Schedule, _Mapping]] = ...) -> None: ...

class DeleteScheduleRequest(_message.Message):
    __slots__ = ("project_id", "name")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    name: str
    def __init__(self, project_id: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class DeleteScheduleResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
