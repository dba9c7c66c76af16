import datetime

from agentfleet.v1 import common_pb2 as _common_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RemoteAgent(_message.Message):
    __slots__ = ("name", "card_url", "headers", "description", "timeout_s", "product_name", "card_name")
    class HeadersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    CARD_URL_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    PRODUCT_NAME_FIELD_NUMBER: _ClassVar[int]
    CARD_NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    card_url: str
    headers: _containers.ScalarMap[str, str]
    description: str
    timeout_s: float
    product_name: str
    card_name: str
    def __init__(self, name: _Optional[str] = ..., card_url: _Optional[str] = ..., headers: _Optional[_Mapping[str, str]] = ..., description: _Optional[str] = ..., timeout_s: _Optional[float] = ..., product_name: _Optional[str] = ..., card_name: _Optional[str] = ...) -> None: ...

class UpsertRemoteAgentRequest(_message.Message):
    __slots__ = ("project_id", "remote_agent")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    REMOTE_AGENT_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    remote_agent: RemoteAgent
    def __init__(self, project_id: _Optional[str] = ..., remote_agent: _Optional[_Union[RemoteAgent, _Mapping]] = ...) -> None: ...

class UpsertRemoteAgentResponse(_message.Message):
    __slots__ = ("remote_agent",)
    REMOTE_AGENT_FIELD_NUMBER: _ClassVar[int]
    remote_agent: RemoteAgent
    def __init__(self, remote_agent: _Optional[_Union[RemoteAgent, _Mapping]] = ...) -> None: ...

class ListRemoteAgentsRequest(_message.Message):
    __slots__ = ("project_id", "page_size", "page_token")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    page_size: int
    page_token: str
    def __init__(self, project_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListRemoteAgentsResponse(_message.Message):
    __slots__ = ("remote_agents", "next_page_token")
    REMOTE_AGENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    remote_agents: _containers.RepeatedCompositeFieldContainer[RemoteAgent]
    next_page_token: str
    def __init__(self, remote_agents: _Optional[_Iterable[_Union[RemoteAgent, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class DeleteRemoteAgentRequest(_message.Message):
    __slots__ = ("project_id", "name")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    name: str
    def __init__(self, project_id: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class DeleteRemoteAgentResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ProjectBudget(_message.Message):
    __slots__ = ("daily_tokens", "monthly_tokens", "daily_cost_nanos", "monthly_cost_nanos", "warn_fraction")
    DAILY_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MONTHLY_TOKENS_FIELD_NUMBER: _ClassVar[int]
    DAILY_COST_NANOS_FIELD_NUMBER: _ClassVar[int]
    MONTHLY_COST_NANOS_FIELD_NUMBER: _ClassVar[int]
    WARN_FRACTION_FIELD_NUMBER: _ClassVar[int]
    daily_tokens: int
    monthly_tokens: int
    daily_cost_nanos: int
    monthly_cost_nanos: int
    warn_fraction: float
    def __init__(self, daily_tokens: _Optional[int] = ..., monthly_tokens: _Optional[int] = ..., daily_cost_nanos: _Optional[int] = ..., monthly_cost_nanos: _Optional[int] = ..., warn_fraction: _Optional[float] = ...) -> None: ...

class ProjectUsage(_message.Message):
    __slots__ = ("day_tokens", "day_cost_nanos", "month_tokens", "month_cost_nanos")
    DAY_TOKENS_FIELD_NUMBER: _ClassVar[int]
    DAY_COST_NANOS_FIELD_NUMBER: _ClassVar[int]
    MONTH_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MONTH_COST_NANOS_FIELD_NUMBER: _ClassVar[int]
    day_tokens: int
    day_cost_nanos: int
    month_tokens: int
    month_cost_nanos: int
    def __init__(self, day_tokens: _Optional[int] = ..., day_cost_nanos: _Optional[int] = ..., month_tokens: _Optional[int] = ..., month_cost_nanos: _Optional[int] = ...) -> None: ...

class SetProjectBudgetRequest(_message.Message):
    __slots__ = ("project_id", "budget")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    budget: ProjectBudget
    def __init__(self, project_id: _Optional[str] = ..., budget: _Optional[_Union[ProjectBudget, _Mapping]] = ...) -> None: ...

class SetProjectBudgetResponse(_message.Message):
    __slots__ = ("budget",)
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    budget: ProjectBudget
    def __init__(self, budget: _Optional[_Union[ProjectBudget, _Mapping]] = ...) -> None: ...

class GetProjectBudgetRequest(_message.Message):
    __slots__ = ("project_id",)
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    def __init__(self, project_id: _Optional[str] = ...) -> None: ...

class GetProjectBudgetResponse(_message.Message):
    __slots__ = ("budget", "usage")
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    budget: ProjectBudget
    usage: ProjectUsage
    def __init__(self, budget: _Optional[_Union[ProjectBudget, _Mapping]] = ..., usage: _Optional[_Union[ProjectUsage, _Mapping]] = ...) -> None: ...

class Product(_message.Message):
    __slots__ = ("name", "version", "manifest", "install_time", "agent_names", "mcp_server_names", "update_time")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    MANIFEST_FIELD_NUMBER: _ClassVar[int]
    INSTALL_TIME_FIELD_NUMBER: _ClassVar[int]
    AGENT_NAMES_FIELD_NUMBER: _ClassVar[int]
    MCP_SERVER_NAMES_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: str
    manifest: _struct_pb2.Struct
    install_time: _timestamp_pb2.Timestamp
    agent_names: _containers.RepeatedScalarFieldContainer[str]
    mcp_server_names: _containers.RepeatedScalarFieldContainer[str]
    update_time: _timestamp_pb2.Timestamp
    def __init__(self, name: _Optional[str] = ..., version: _Optional[str] = ..., manifest: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., install_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., agent_names: _Optional[_Iterable[str]] = ..., mcp_server_names: _Optional[_Iterable[str]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class InstallProductRequest(_message.Message):
    __slots__ = ("project_id", "manifest", "request_id", "validate_only")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    MANIFEST_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    manifest: _struct_pb2.Struct
    request_id: str
    validate_only: bool
    def __init__(self, project_id: _Optional[str] = ..., manifest: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., request_id: _Optional[str] = ..., validate_only: _Optional[bool] = ...) -> None: ...

class InstallProductResponse(_message.Message):
    __slots__ = ("product", "previous_version", "created_agent_names", "updated_agent_names", "removed_agent_names", "upserted_mcp_server_names", "removed_mcp_server_names")
    PRODUCT_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_VERSION_FIELD_NUMBER: _ClassVar[int]
    CREATED_AGENT_NAMES_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AGENT_NAMES_FIELD_NUMBER: _ClassVar[int]
    REMOVED_AGENT_NAMES_FIELD_NUMBER: _ClassVar[int]
    UPSERTED_MCP_SERVER_NAMES_FIELD_NUMBER: _ClassVar[int]
    REMOVED_MCP_SERVER_NAMES_FIELD_NUMBER: _ClassVar[int]
    product: Product
    previous_version: str
    created_agent_names: _containers.RepeatedScalarFieldContainer[str]
    updated_agent_names: _containers.RepeatedScalarFieldContainer[str]
    removed_agent_names: _containers.RepeatedScalarFieldContainer[str]
    upserted_mcp_server_names: _containers.RepeatedScalarFieldContainer[str]
    removed_mcp_server_names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, product: _Optional[_Union[Product, _Mapping]] = ..., previous_version: _Optional[str] = ..., created_agent_names: _Optional[_Iterable[str]] = ..., updated_agent_names: _Optional[_Iterable[str]] = ..., removed_agent_names: _Optional[_Iterable[str]] = ..., upserted_mcp_server_names: _Optional[_Iterable[str]] = ..., removed_mcp_server_names: _Optional[_Iterable[str]] = ...) -> None: ...

class UninstallProductRequest(_message.Message):
    __slots__ = ("project_id", "product_name")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCT_NAME_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    product_name: str
    def __init__(self, project_id: _Optional[str] = ..., product_name: _Optional[str] = ...) -> None: ...

class UninstallProductResponse(_message.Message):
    __slots__ = ("removed_agent_names", "removed_mcp_server_names")
    REMOVED_AGENT_NAMES_FIELD_NUMBER: _ClassVar[int]
    REMOVED_MCP_SERVER_NAMES_FIELD_NUMBER: _ClassVar[int]
    removed_agent_names: _containers.RepeatedScalarFieldContainer[str]
    removed_mcp_server_names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, removed_agent_names: _Optional[_Iterable[str]] = ..., removed_mcp_server_names: _Optional[_Iterable[str]] = ...) -> None: ...

class ListProductsRequest(_message.Message):
    __slots__ = ("project_id", "page_size", "page_token")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    page_size: int
    page_token: str
    def __init__(self, project_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListProductsResponse(_message.Message):
    __slots__ = ("products", "next_page_token")
    PRODUCTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    products: _containers.RepeatedCompositeFieldContainer[Product]
    next_page_token: str
    def __init__(self, products: _Optional[_Iterable[_Union[Product, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListAgentDefinitionsRequest(_message.Message):
    __slots__ = ("project_id", "page_size", "page_token", "visibilities", "product_name")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    VISIBILITIES_FIELD_NUMBER: _ClassVar[int]
    PRODUCT_NAME_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    page_size: int
    page_token: str
    visibilities: _containers.RepeatedScalarFieldContainer[_common_pb2.Visibility]
    product_name: str
    def __init__(self, project_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., visibilities: _Optional[_Iterable[_Union[_common_pb2.Visibility, str]]] = ..., product_name: _Optional[str] = ...) -> None: ...

class ListAgentDefinitionsResponse(_message.Message):
    __slots__ = ("agent_definitions", "next_page_token")
    AGENT_DEFINITIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    agent_definitions: _containers.RepeatedCompositeFieldContainer[_common_pb2.AgentDefinition]
    next_page_token: str
    def __init__(self, agent_definitions: _Optional[_Iterable[_Union[_common_pb2.AgentDefinition, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class GetAgentDefinitionRequest(_message.Message):
    __slots__ = ("project_id", "name")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    name: str
    def __init__(self, project_id: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class GetAgentDefinitionResponse(_message.Message):
    __slots__ = ("agent_definition",)
    AGENT_DEFINITION_FIELD_NUMBER: _ClassVar[int]
    agent_definition: _common_pb2.AgentDefinition
    def __init__(self, agent_definition: _Optional[_Union[_common_pb2.AgentDefinition, _Mapping]] = ...) -> None: ...

class UpsertAgentDefinitionRequest(_message.Message):
    __slots__ = ("project_id", "agent_definition", "expected_version", "validate_only")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_DEFINITION_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    agent_definition: _common_pb2.AgentDefinition
    expected_version: int
    validate_only: bool
    def __init__(self, project_id: _Optional[str] = ..., agent_definition: _Optional[_Union[_common_pb2.AgentDefinition, _Mapping]] = ..., expected_version: _Optional[int] = ..., validate_only: _Optional[bool] = ...) -> None: ...

class UpsertAgentDefinitionResponse(_message.Message):
    __slots__ = ("agent_definition", "created")
    AGENT_DEFINITION_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    agent_definition: _common_pb2.AgentDefinition
    created: bool
    def __init__(self, agent_definition: _Optional[_Union[_common_pb2.AgentDefinition, _Mapping]] = ..., created: _Optional[bool] = ...) -> None: ...

class DeleteAgentDefinitionRequest(_message.Message):
    __slots__ = ("project_id", "name")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    name: str
    def __init__(self, project_id: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class DeleteAgentDefinitionResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
