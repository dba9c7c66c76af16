"""AgentRegistryService: protobuf <-> domain, nothing else.

Products go to :class:`ProductRegistry`, definitions to :class:`DefinitionRepository`;
manifests and Struct fields cross as plain dicts through ``json_format``.
"""

from __future__ import annotations

from datetime import timedelta

import grpc
from google.protobuf import duration_pb2, json_format, struct_pb2

from agentfleet.errors import FieldViolation, InvalidArgument
from agentfleet.timestamps import timestamp_proto
from agentfleet.v1 import common_pb2, registry_pb2, registry_pb2_grpc
from services.executor.registry.definitions import (
    AgentDefinition,
    DefinitionRepository,
    FlowType,
    ModelConfig,
    Visibility,
)
from services.executor.registry.manifest import definition_violations
from services.executor.registry.products import InstallResult, Product, ProductRegistry

_FLOW_TO_PROTO: dict[str, int] = {
    "single": common_pb2.FLOW_TYPE_SINGLE,
    "sequential": common_pb2.FLOW_TYPE_SEQUENTIAL,
    "loop": common_pb2.FLOW_TYPE_LOOP,
    "parallel": common_pb2.FLOW_TYPE_PARALLEL,
}
_FLOW_FROM_PROTO: dict[int, FlowType] = {
    common_pb2.FLOW_TYPE_UNSPECIFIED: "single",
    common_pb2.FLOW_TYPE_SINGLE: "single",
    common_pb2.FLOW_TYPE_SEQUENTIAL: "sequential",
    common_pb2.FLOW_TYPE_LOOP: "loop",
    common_pb2.FLOW_TYPE_PARALLEL: "parallel",
}
_VISIBILITY_TO_PROTO: dict[str, int] = {
    "external": common_pb2.VISIBILITY_EXTERNAL,
    "project": common_pb2.VISIBILITY_PROJECT,
    "internal": common_pb2.VISIBILITY_INTERNAL,
}
_VISIBILITY_FROM_PROTO: dict[int, Visibility] = {
    common_pb2.VISIBILITY_EXTERNAL: "external",
    common_pb2.VISIBILITY_PROJECT: "project",
    common_pb2.VISIBILITY_INTERNAL: "internal",
}


class AgentRegistryServicer(registry_pb2_grpc.AgentRegistryServiceServicer):
    """Installs products and manages agent definitions (project scope checked upstream)."""

    def __init__(self, products: ProductRegistry, definitions: DefinitionRepository) -> None:
        self._products = products
        self._definitions = definitions

    async def InstallProduct(
        self, request: registry_pb2.InstallProductRequest, context: grpc.aio.ServicerContext
    ) -> registry_pb2.InstallProductResponse:
        if not request.HasField("manifest"):
            raise InvalidArgument.for_field("manifest", "is required")
        result = await self._products.install(
            request.project_id,
            json_format.MessageToDict(request.manifest),
            request_id=request.request_id,
            validate_only=request.validate_only,
        )
        return _install_response(result)

    async def UninstallProduct(
        self, request: registry_pb2.UninstallProductRequest, context: grpc.aio.ServicerContext
    ) -> registry_pb2.UninstallProductResponse:
        if not request.product_name:
            raise InvalidArgument.for_field("product_name", "is required")
        result = await self._products.uninstall(request.project_id, request.product_name)
        return registry_pb2.UninstallProductResponse(
            removed_agent_names=result.removed_agent_names,
            removed_mcp_server_names=result.removed_mcp_server_names,
        )

    async def ListProducts(
        self, request: registry_pb2.ListProductsRequest, context: grpc.aio.ServicerContext
    ) -> registry_pb2.ListProductsResponse:
        page = await self._products.list_products(
            request.project_id, page_size=request.page_size, page_token=request.page_token
        )
        return registry_pb2.ListProductsResponse(
            products=[product_to_proto(p) for p in page.products],
            next_page_token=page.next_page_token,
        )

    async def ListAgentDefinitions(
        self, request: registry_pb2.ListAgentDefinitionsRequest, context: grpc.aio.ServicerContext
    ) -> registry_pb2.ListAgentDefinitionsResponse:
        visibilities: list[Visibility] = []
        for i, value in enumerate(request.visibilities):
            if value not in _VISIBILITY_FROM_PROTO:
                raise InvalidArgument.for_field(
                    f"visibilities[{i}]", "must be VISIBILITY_EXTERNAL, _PROJECT or _INTERNAL"
                )
            visibilities.append(_VISIBILITY_FROM_PROTO[value])
        page = await self._definitions.list(
            request.project_id,
            visibilities=visibilities or ("external", "project"),
            product_name=request.product_name,
            page_size=request.page_size,
            page_token=request.page_token,
        )
        return registry_pb2.ListAgentDefinitionsResponse(
            agent_definitions=[definition_to_proto(d) for d in page.definitions],
            next_page_token=page.next_page_token,
        )

    async def GetAgentDefinition(
        self, request: registry_pb2.GetAgentDefinitionRequest, context: grpc.aio.ServicerContext
    ) -> registry_pb2.GetAgentDefinitionResponse:
        if not request.name:
            raise InvalidArgument.for_field("name", "is required")
        definition = await self._definitions.get(request.project_id, request.name)
        return registry_pb2.GetAgentDefinitionResponse(
            agent_definition=definition_to_proto(definition)
        )

    async def UpsertAgentDefinition(
        self, request: registry_pb2.UpsertAgentDefinitionRequest, context: grpc.aio.ServicerContext
    ) -> registry_pb2.UpsertAgentDefinitionResponse:
        if not request.HasField("agent_definition"):
            raise InvalidArgument.for_field("agent_definition", "is required")
        if request.expected_version < 0:
            raise InvalidArgument.for_field("expected_version", "must not be negative")
        definition = definition_from_proto(request.agent_definition)
        violations = _required(request.agent_definition) or definition_violations(definition)
        if violations:
            raise InvalidArgument.for_fields(violations)
        result = await self._definitions.upsert(
            request.project_id,
            definition,
            expected_version=request.expected_version or None,
            validate_only=request.validate_only,
        )
        return registry_pb2.UpsertAgentDefinitionResponse(
            agent_definition=definition_to_proto(result.definition), created=result.created
        )

    async def DeleteAgentDefinition(
        self, request: registry_pb2.DeleteAgentDefinitionRequest, context: grpc.aio.ServicerContext
    ) -> registry_pb2.DeleteAgentDefinitionResponse:
        if not request.name:
            raise InvalidArgument.for_field("name", "is required")
        await self._definitions.delete(request.project_id, request.name)
        return registry_pb2.DeleteAgentDefinitionResponse()


def _required(message: common_pb2.AgentDefinition) -> list[FieldViolation]:
    out = []
    if not message.name:
        out.append(FieldViolation("agent_definition.name", "is required"))
    if not message.model.name:
        out.append(FieldViolation("agent_definition.model.name", "is required"))
    return out


def definition_from_proto(message: common_pb2.AgentDefinition) -> AgentDefinition:
    """The writable fields of ``message``; output-only fields are ignored."""
    model = message.model
    temperature = model.temperature if model.HasField("temperature") else None
    return AgentDefinition(
        name=message.name,
        description=message.description,
        system_prompt=message.system_prompt,
        model=ModelConfig(
            provider=model.provider or "google",
            name=model.name,
            # float32 on the wire: 0.2 arrives as 0.2000000029...; keep what the user meant.
            temperature=round(temperature, 6) if temperature is not None else None,
            max_output_tokens=(
                model.max_output_tokens if model.HasField("max_output_tokens") else None
            ),
            extra=json_format.MessageToDict(model.extra) if model.HasField("extra") else {},
        ),
        tools=list(message.tools),
        flow_type=_FLOW_FROM_PROTO.get(message.flow_type, "single"),
        sub_agents=list(message.sub_agents),
        max_iterations=message.max_iterations or None,
        max_steps=message.max_steps if message.HasField("max_steps") else None,
        default_timeout_s=(
            message.default_timeout.ToTimedelta().total_seconds()
            if message.HasField("default_timeout")
            else None
        ),
        visibility=_VISIBILITY_FROM_PROTO.get(message.visibility, "project"),
        is_default=message.is_default,
        tags=list(message.tags),
        trigger=message.trigger or None,
        config=json_format.MessageToDict(message.config) if message.HasField("config") else {},
        output_schema=(
            json_format.MessageToDict(message.output_schema)
            if message.HasField("output_schema")
            else None
        ),
        streaming=message.streaming if message.HasField("streaming") else None,
    )


def definition_to_proto(definition: AgentDefinition) -> common_pb2.AgentDefinition:
    """A stored definition as the proto message."""
    model = definition.model
    message = common_pb2.AgentDefinition(
        id=str(definition.id) if definition.id else "",
        project_id=definition.project_id,
        name=definition.name,
        description=definition.description,
        system_prompt=definition.system_prompt,
        model=common_pb2.ModelConfig(
            provider=model.provider,
            name=model.name,
            temperature=model.temperature,
            max_output_tokens=model.max_output_tokens,
            extra=_struct(model.extra) if model.extra else None,
        ),
        tools=definition.tools,
        flow_type=_FLOW_TO_PROTO[definition.flow_type],
        sub_agents=definition.sub_agents,
        max_iterations=definition.max_iterations or 0,
        max_steps=definition.max_steps,
        visibility=_VISIBILITY_TO_PROTO[definition.visibility],
        is_default=definition.is_default,
        tags=definition.tags,
        trigger=definition.trigger or "",
        config=_struct(definition.config),
        product_name=definition.product_name,
        version=definition.version,
        create_time=timestamp_proto(definition.created_at),
        update_time=timestamp_proto(definition.updated_at),
        output_schema=(
            _struct(definition.output_schema) if definition.output_schema is not None else None
        ),
        streaming=definition.streaming,
    )
    if definition.default_timeout_s is not None:
        duration = duration_pb2.Duration()
        duration.FromTimedelta(timedelta(seconds=definition.default_timeout_s))
        message.default_timeout.CopyFrom(duration)
    return message


def product_to_proto(product: Product) -> registry_pb2.Product:
    return registry_pb2.Product(
        name=product.name,
        version=product.version,
        manifest=_struct(product.manifest),
        install_time=timestamp_proto(product.installed_at),
        update_time=timestamp_proto(product.updated_at),
        agent_names=product.agent_names,
        mcp_server_names=product.mcp_server_names,
    )


def _install_response(result: InstallResult) -> registry_pb2.InstallProductResponse:
    return registry_pb2.InstallProductResponse(
        product=product_to_proto(result.product),
        previous_version=result.previous_version,
        created_agent_names=result.created_agent_names,
        updated_agent_names=result.updated_agent_names,
        removed_agent_names=result.removed_agent_names,
        upserted_mcp_server_names=result.upserted_mcp_server_names,
        removed_mcp_server_names=result.removed_mcp_server_names,
    )


def _struct(document: dict) -> struct_pb2.Struct:  # type: ignore[type-arg]
    return json_format.ParseDict(document, struct_pb2.Struct())
