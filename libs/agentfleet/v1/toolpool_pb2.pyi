import datetime

from agentfleet.v1 import common_pb2 as _common_pb2
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

class ToolExecutor(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOOL_EXECUTOR_UNSPECIFIED: _ClassVar[ToolExecutor]
    TOOL_EXECUTOR_EXECUTOR: _ClassVar[ToolExecutor]
    TOOL_EXECUTOR_TOOLPOOL: _ClassVar[ToolExecutor]

class McpTransport(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MCP_TRANSPORT_UNSPECIFIED: _ClassVar[McpTransport]
    MCP_TRANSPORT_STDIO: _ClassVar[McpTransport]
    MCP_TRANSPORT_SSE: _ClassVar[McpTransport]
    MCP_TRANSPORT_STREAMABLE_HTTP: _ClassVar[McpTransport]

class McpBreakerState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MCP_BREAKER_STATE_UNSPECIFIED: _ClassVar[McpBreakerState]
    MCP_BREAKER_STATE_CLOSED: _ClassVar[McpBreakerState]
    MCP_BREAKER_STATE_OPEN: _ClassVar[McpBreakerState]
    MCP_BREAKER_STATE_HALF_OPEN: _ClassVar[McpBreakerState]
TOOL_EXECUTOR_UNSPECIFIED: ToolExecutor
TOOL_EXECUTOR_EXECUTOR: ToolExecutor
TOOL_EXECUTOR_TOOLPOOL: ToolExecutor
MCP_TRANSPORT_UNSPECIFIED: McpTransport
MCP_TRANSPORT_STDIO: McpTransport
MCP_TRANSPORT_SSE: McpTransport
MCP_TRANSPORT_STREAMABLE_HTTP: McpTransport
MCP_BREAKER_STATE_UNSPECIFIED: McpBreakerState
MCP_BREAKER_STATE_CLOSED: McpBreakerState
MCP_BREAKER_STATE_OPEN: McpBreakerState
MCP_BREAKER_STATE_HALF_OPEN: McpBreakerState

class ToolDefinition(_message.Message):
    __slots__ = ("name", "description", "parameters", "source", "executed_by", "output_schema", "mcp_tool_name")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    EXECUTED_BY_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    MCP_TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    parameters: _struct_pb2.Struct
    source: _common_pb2.ToolSource
    executed_by: ToolExecutor
    output_schema: _struct_pb2.Struct
    mcp_tool_name: str
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., parameters: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., source: _Optional[_Union[_common_pb2.ToolSource, _Mapping]] = ..., executed_by: _Optional[_Union[ToolExecutor, str]] = ..., output_schema: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., mcp_tool_name: _Optional[str] = ...) -> None: ...

class UnavailableServer(_message.Message):
    __slots__ = ("name", "error")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    name: str
    error: str
    def __init__(self, name: _Optional[str] = ..., error: _Optional[str] = ...) -> None: ...

class ListToolsRequest(_message.Message):
    __slots__ = ("project_id", "page_size", "page_token", "source_kind", "mcp_server")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SOURCE_KIND_FIELD_NUMBER: _ClassVar[int]
    MCP_SERVER_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    page_size: int
    page_token: str
    source_kind: _common_pb2.ToolSourceKind
    mcp_server: str
    def __init__(self, project_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., source_kind: _Optional[_Union[_common_pb2.ToolSourceKind, str]] = ..., mcp_server: _Optional[str] = ...) -> None: ...

class ListToolsResponse(_message.Message):
    __slots__ = ("tools", "next_page_token", "unavailable_servers")
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    UNAVAILABLE_SERVERS_FIELD_NUMBER: _ClassVar[int]
    tools: _containers.RepeatedCompositeFieldContainer[ToolDefinition]
    next_page_token: str
    unavailable_servers: _containers.RepeatedCompositeFieldContainer[UnavailableServer]
    def __init__(self, tools: _Optional[_Iterable[_Union[ToolDefinition, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., unavailable_servers: _Optional[_Iterable[_Union[UnavailableServer, _Mapping]]] = ...) -> None: ...

class ResolveToolsRequest(_message.Message):
    __slots__ = ("project_id", "patterns", "depth")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    PATTERNS_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    patterns: _containers.RepeatedScalarFieldContainer[str]
    depth: int
    def __init__(self, project_id: _Optional[str] = ..., patterns: _Optional[_Iterable[str]] = ..., depth: _Optional[int] = ...) -> None: ...

class ResolveToolsResponse(_message.Message):
    __slots__ = ("tools", "unavailable_servers")
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    UNAVAILABLE_SERVERS_FIELD_NUMBER: _ClassVar[int]
    tools: _containers.RepeatedCompositeFieldContainer[ToolDefinition]
    unavailable_servers: _containers.RepeatedCompositeFieldContainer[UnavailableServer]
    def __init__(self, tools: _Optional[_Iterable[_Union[ToolDefinition, _Mapping]]] = ..., unavailable_servers: _Optional[_Iterable[_Union[UnavailableServer, _Mapping]]] = ...) -> None: ...

class CallToolRequest(_message.Message):
    __slots__ = ("project_id", "run_id", "tool_call_id", "tool_name", "arguments", "timeout")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    run_id: str
    tool_call_id: str
    tool_name: str
    arguments: _struct_pb2.Struct
    timeout: _duration_pb2.Duration
    def __init__(self, project_id: _Optional[str] = ..., run_id: _Optional[str] = ..., tool_call_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., arguments: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class CallToolResponse(_message.Message):
    __slots__ = ("result", "is_error", "error_message", "duration", "truncated", "result_size_bytes", "source", "failed")
    RESULT_FIELD_NUMBER: _ClassVar[int]
    IS_ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    RESULT_SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    result: _struct_pb2.Struct
    is_error: bool
    error_message: str
    duration: _duration_pb2.Duration
    truncated: bool
    result_size_bytes: int
    source: _common_pb2.ToolSource
    failed: bool
    def __init__(self, result: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., is_error: _Optional[bool] = ..., error_message: _Optional[str] = ..., duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., truncated: _Optional[bool] = ..., result_size_bytes: _Optional[int] = ..., source: _Optional[_Union[_common_pb2.ToolSource, _Mapping]] = ..., failed: _Optional[bool] = ...) -> None: ...

class McpServer(_message.Message):
    __slots__ = ("name", "transport", "command", "args", "env", "url", "headers", "tool_prefix", "enabled", "connect_timeout", "call_timeout", "product_name", "create_time", "update_time", "health")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class HeadersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    TRANSPORT_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    ARGS_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    TOOL_PREFIX_FIELD_NUMBER: _ClassVar[int]
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    CONNECT_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    CALL_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    PRODUCT_NAME_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    name: str
    transport: McpTransport
    command: str
    args: _containers.RepeatedScalarFieldContainer[str]
    env: _containers.ScalarMap[str, str]
    url: str
    headers: _containers.ScalarMap[str, str]
    tool_prefix: str
    enabled: bool
    connect_timeout: _duration_pb2.Duration
    call_timeout: _duration_pb2.Duration
    product_name: str
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    health: McpServerHealth
    def __init__(self, name: _Optional[str] = ..., transport: _Optional[_Union[McpTransport, str]] = ..., command: _Optional[str] = ..., args: _Optional[_Iterable[str]] = ..., env: _Optional[_Mapping[str, str]] = ..., url: _Optional[str] = ..., headers: _Optional[_Mapping[str, str]] = ..., tool_prefix: _Optional[str] = ..., enabled: _Optional[bool] = ..., connect_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., call_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., product_name: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., health: _Optional[_Union[McpServerHealth, _Mapping]] = ...) -> None: ...

class McpServerHealth(_message.Message):
    __slots__ = ("breaker", "consecutive_failures", "last_success_time", "last_failure_time", "last_error", "retry_after", "connected")
    BREAKER_FIELD_NUMBER: _ClassVar[int]
    CONSECUTIVE_FAILURES_FIELD_NUMBER: _ClassVar[int]
    LAST_SUCCESS_TIME_FIELD_NUMBER: _ClassVar[int]
    LAST_FAILURE_TIME_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_FIELD_NUMBER: _ClassVar[int]
    breaker: McpBreakerState
    consecutive_failures: int
    last_success_time: _timestamp_pb2.Timestamp
    last_failure_time: _timestamp_pb2.Timestamp
    last_error: str
    retry_after: _duration_pb2.Duration
    connected: bool
    def __init__(self, breaker: _Optional[_Union[McpBreakerState, str]] = ..., consecutive_failures: _Optional[int] = ..., last_success_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_failure_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_error: _Optional[str] = ..., retry_after: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., connected: _Optional[bool] = ...) -> None: ...

class UpsertMcpServerRequest(_message.Message):
    __slots__ = ("project_id", "mcp_server", "validate_only")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    MCP_SERVER_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    mcp_server: McpServer
    validate_only: bool
    def __init__(self, project_id: _Optional[str] = ..., mcp_server: _Optional[_Union[McpServer, _Mapping]] = ..., validate_only: _Optional[bool] = ...) -> None: ...

class UpsertMcpServerResponse(_message.Message):
    __slots__ = ("mcp_server", "created")
    MCP_SERVER_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    mcp_server: McpServer
    created: bool
    def __init__(self, mcp_server: _Optional[_Union[McpServer, _Mapping]] = ..., created: _Optional[bool] = ...) -> None: ...

class ListMcpServersRequest(_message.Message):
    __slots__ = ("project_id", "page_size", "page_token")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    page_size: int
    page_token: str
    def __init__(self, project_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListMcpServersResponse(_message.Message):
    __slots__ = ("mcp_servers", "next_page_token")
    MCP_SERVERS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    mcp_servers: _containers.RepeatedCompositeFieldContainer[McpServer]
    next_page_token: str
    def __init__(self, mcp_servers: _Optional[_Iterable[_Union[McpServer, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class DeleteMcpServerRequest(_message.Message):
    __slots__ = ("project_id", "name")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    name: str
    def __init__(self, project_id: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class DeleteMcpServerResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TestMcpServerRequest(_message.Message):
    __slots__ = ("project_id", "name", "mcp_server")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    MCP_SERVER_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    name: str
    mcp_server: McpServer
    def __init__(self, project_id: _Optional[str] = ..., name: _Optional[str] = ..., mcp_server: _Optional[_Union[McpServer, _Mapping]] = ...) -> None: ...

class TestMcpServerResponse(_message.Message):
    __slots__ = ("ok", "error", "tools", "server_name", "server_version", "duration")
    OK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    SERVER_NAME_FIELD_NUMBER: _ClassVar[int]
    SERVER_VERSION_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    error: str
    tools: _containers.RepeatedCompositeFieldContainer[ToolDefinition]
    server_name: str
    server_version: str
    duration: _duration_pb2.Duration
    def __init__(self, ok: _Optional[bool] = ..., error: _Optional[str] = ..., tools: _Optional[_Iterable[_Union[ToolDefinition, _Mapping]]] = ..., server_name: _Optional[str] = ..., server_version: _Optional[str] = ..., duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class Secret(_message.Message):
    __slots__ = ("name", "create_time", "update_time")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    name: str
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    def __init__(self, name: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class SetSecretRequest(_message.Message):
    __slots__ = ("project_id", "name", "value")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    name: str
    value: str
    def __init__(self, project_id: _Optional[str] = ..., name: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class SetSecretResponse(_message.Message):
    __slots__ = ("secret", "created")
    SECRET_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    secret: Secret
    created: bool
    def __init__(self, secret: _Optional[_Union[Secret, _Mapping]] = ..., created: _Optional[bool] = ...) -> None: ...

class ListSecretsRequest(_message.Message):
    __slots__ = ("project_id", "page_size", "page_token")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    page_size: int
    page_token: str
    def __init__(self, project_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListSecretsResponse(_message.Message):
    __slots__ = ("secrets", "next_page_token")
    SECRETS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    secrets: _containers.RepeatedCompositeFieldContainer[Secret]
    next_page_token: str
    def __init__(self, secrets: _Optional[_Iterable[_Union[Secret, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class DeleteSecretRequest(_message.Message):
    __slots__ = ("project_id", "name")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    name: str
    def __init__(self, project_id: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class DeleteSecretResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
