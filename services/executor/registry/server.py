"""AgentRegistryService: protobuf <-> domain, nothing else.

Products go to :class:`ProductRegistry`, definitions to :class:`DefinitionRepository`;
manifests and Struct fields cross as plain dicts through ``json_format``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import grpc
from google.protobuf import duration_pb2

from agentfleet.auth import current_principal
from agentfleet.errors import FieldViolation, InvalidArgument
from agentfleet.mcp.config import member_view
from agentfleet.settings.trigger_limits import TriggerLimits
from agentfleet.structs import struct_dict, to_struct
from agentfleet.timestamps import timestamp_proto
from agentfleet.v1 import common_pb2, registry_pb2, registry_pb2_grpc
from services.executor.model.budgets import (
    DEFAULT_WARN_FRACTION,
    LIMITS,
    BudgetStore,
    ProjectBudget,
)
from services.executor.registry.definitions import (
    EXTERNAL_LISTING,
    AgentDefinition,
    DefinitionRepository,
    FlowType,
    ModelConfig,
    Visibility,
)
from services.executor.registry.model_config import DEFAULT_PROVIDER
from services.executor.registry.products import InstallResult, Product, ProductRegistry
from services.executor.registry.remote_agents import RemoteAgent
from services.executor.registry.remote_registry import RemoteAgentRegistry
from services.executor.registry.write_checks import checked_definition, manifest_document
from services.executor.triggers.grammar import schedule_config_violations

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


@dataclass(frozen=True, slots=True)
class AgentRegistryServicer(registry_pb2_grpc.AgentRegistryServiceServicer):
    """Installs products and manages agent definitions (project scope checked upstream)."""

    products: ProductRegistry
    definitions: DefinitionRepository
    budgets: BudgetStore
    remote_agents: RemoteAgentRegistry
    schedule_min_interval_s: int = TriggerLimits().schedule_min_interval_s
    """AGENTFLEET_SCHEDULE_MIN_INTERVAL_S, for a definition's config.schedule."""

    async def InstallProduct(
        self, request: registry_pb2.InstallProductRequest, context: grpc.aio.ServicerContext
    ) -> registry_pb2.InstallProductResponse:
        manifest = _required_field(request, "manifest")
        result = await self.products.install(
            request.project_id,
            await manifest_document(manifest),
            request_id=request.request_id,
            validate_only=request.validate_only,
        )
        return _install_response(result)

    async def UninstallProduct(
        self, request: registry_pb2.UninstallProductRequest, context: grpc.aio.ServicerContext
    ) -> registry_pb2.UninstallProductResponse:
        product_name = _required_field(request, "product_name")
        result = await self.products.uninstall(request.project_id, product_name)
        return registry_pb2.UninstallProductResponse(
            removed_agent_names=result.removed_agent_names,
            removed_mcp_server_names=result.removed_mcp_server_names,
        )

    async def ListProducts(
        self, request: registry_pb2.ListProductsRequest, context: grpc.aio.ServicerContext
    ) -> registry_pb2.ListProductsResponse:
        products, token = await self.products.list_products(request.project_id, **_paging(request))
        if current_principal.get().role != "admin":
            products = [_member_view(p) for p in products]
        return registry_pb2.ListProductsResponse(
            products=[product_to_proto(p) for p in products], next_page_token=token
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
        definitions, token = await self.definitions.list(
            request.project_id,
            visibilities=visibilities or EXTERNAL_LISTING,
            product_name=request.product_name,
            **_paging(request),
        )
        return registry_pb2.ListAgentDefinitionsResponse(
            agent_definitions=[definition_to_proto(d) for d in definitions], next_page_token=token
        )

    async def GetAgentDefinition(
        self, request: registry_pb2.GetAgentDefinitionRequest, context: grpc.aio.ServicerContext
    ) -> registry_pb2.GetAgentDefinitionResponse:
        definition = await self.definitions.get(
            request.project_id, _required_field(request, "name")
        )
        return registry_pb2.GetAgentDefinitionResponse(
            agent_definition=definition_to_proto(definition)
        )

    async def UpsertAgentDefinition(
        self, request: registry_pb2.UpsertAgentDefinitionRequest, context: grpc.aio.ServicerContext
    ) -> registry_pb2.UpsertAgentDefinitionResponse:
        _required_field(request, "agent_definition")
        if request.expected_version < 0:
            raise InvalidArgument.for_field("expected_version", "must not be negative")
        definition = definition_from_proto(request.agent_definition)
        violations = (
            _required(request.agent_definition)
            or await checked_definition(definition)
            or schedule_config_violations(
                definition.config, "agent_definition", min_interval_s=self.schedule_min_interval_s
            )
        )
        if violations:
            raise InvalidArgument.for_fields(violations)
        result = await self.definitions.upsert(
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
        await self.definitions.delete(request.project_id, _required_field(request, "name"))
        return registry_pb2.DeleteAgentDefinitionResponse()

    async def SetProjectBudget(
        self, request: registry_pb2.SetProjectBudgetRequest, context: grpc.aio.ServicerContext
    ) -> registry_pb2.SetProjectBudgetResponse:
        stored = await self.budgets.set(request.project_id, _budget_from_proto(request.budget))
        return registry_pb2.SetProjectBudgetResponse(budget=_budget_to_proto(stored))

    async def GetProjectBudget(
        self, request: registry_pb2.GetProjectBudgetRequest, context: grpc.aio.ServicerContext
    ) -> registry_pb2.GetProjectBudgetResponse:
        budget, usage, _ = await self.budgets.read(request.project_id)
        return registry_pb2.GetProjectBudgetResponse(
            budget=_budget_to_proto(budget),
            usage=registry_pb2.ProjectUsage(**dataclasses.asdict(usage)),
        )

    async def UpsertRemoteAgent(
        self, request: registry_pb2.UpsertRemoteAgentRequest, context: grpc.aio.ServicerContext
    ) -> registry_pb2.UpsertRemoteAgentResponse:
        message = _required_field(request, "remote_agent")
        stored = await self.remote_agents.upsert(
            request.project_id,
            RemoteAgent(
                name=message.name,
                card_url=message.card_url,
                headers=dict(message.headers),
                description=message.description,
                timeout_s=message.timeout_s,
            ),
        )
        return registry_pb2.UpsertRemoteAgentResponse(remote_agent=_remote_to_proto(stored))

    async def ListRemoteAgents(
        self, request: registry_pb2.ListRemoteAgentsRequest, context: grpc.aio.ServicerContext
    ) -> registry_pb2.ListRemoteAgentsResponse:
        admin = current_principal.get().role == "admin"
        agents, token = await self.remote_agents.page(
            request.project_id, admin=admin, **_paging(request)
        )
        return registry_pb2.ListRemoteAgentsResponse(
            remote_agents=[_remote_to_proto(a) for a in agents], next_page_token=token
        )

    async def DeleteRemoteAgent(
        self, request: registry_pb2.DeleteRemoteAgentRequest, context: grpc.aio.ServicerContext
    ) -> registry_pb2.DeleteRemoteAgentResponse:
        await self.remote_agents.delete(request.project_id, _required_field(request, "name"))
        return registry_pb2.DeleteRemoteAgentResponse()


def _remote_to_proto(agent: RemoteAgent) -> registry_pb2.RemoteAgent:
    return registry_pb2.RemoteAgent(
        name=agent.name,
        card_url=agent.card_url,
        headers=dict(agent.headers),
        description=agent.description,
        timeout_s=agent.timeout_s,
        product_name=agent.product_name,
        card_name=agent.card_name,
    )


def _budget_from_proto(message: registry_pb2.ProjectBudget) -> ProjectBudget:
    limits = {name: getattr(message, name) if message.HasField(name) else None for name in LIMITS}
    fraction = message.warn_fraction if message.HasField("warn_fraction") else None
    return ProjectBudget(
        **limits, warn_fraction=DEFAULT_WARN_FRACTION if fraction is None else fraction
    ).checked()


def _budget_to_proto(budget: ProjectBudget) -> registry_pb2.ProjectBudget:
    limits = {name: getattr(budget, name) for name in LIMITS}
    return registry_pb2.ProjectBudget(
        **{name: value for name, value in limits.items() if value is not None},
        warn_fraction=budget.warn_fraction,
    )


def _required_field(request: Any, field: str) -> Any:
    """``request.<field>``; INVALID_ARGUMENT naming it when it is unset or empty."""
    is_message = request.DESCRIPTOR.fields_by_name[field].message_type is not None
    if not (request.HasField(field) if is_message else getattr(request, field)):
        raise InvalidArgument.for_field(field, "is required")
    return getattr(request, field)


def _paging(request: Any) -> dict[str, Any]:
    """The paging fields every List request carries, as the repositories' keywords."""
    return {"page_size": request.page_size, "page_token": request.page_token}


def _required(message: common_pb2.AgentDefinition) -> list[FieldViolation]:
    out = []
    if not message.name:
        out.append(FieldViolation("agent_definition.name", "is required"))
    if not message.model.name:
        out.append(FieldViolation("agent_definition.model.name", "is required"))
    return out


_SAME_SCALARS = ("name", "description", "system_prompt", "is_default")
_SAME_LISTS = ("tools", "sub_agents", "tags")
_OPTIONAL = ("max_steps", "streaming")
"""Fields named and typed alike in the proto and the dataclass (optional: unset is None)."""
_OUTPUT_ONLY = ("project_id", "product_name", "version")


def definition_from_proto(message: common_pb2.AgentDefinition) -> AgentDefinition:
    """The writable fields of ``message``; output-only fields are ignored."""
    return AgentDefinition(
        **{f: getattr(message, f) for f in _SAME_SCALARS},
        **{f: list(getattr(message, f)) for f in _SAME_LISTS},
        **{f: getattr(message, f) if message.HasField(f) else None for f in _OPTIONAL},
        model=_model_from_proto(message.model),
        flow_type=_FLOW_FROM_PROTO.get(message.flow_type, "single"),
        max_iterations=message.max_iterations or None,
        default_timeout_s=(
            message.default_timeout.ToTimedelta().total_seconds()
            if message.HasField("default_timeout")
            else None
        ),
        visibility=_VISIBILITY_FROM_PROTO.get(message.visibility, "project"),
        trigger=message.trigger or None,
        config=_document(message, "config", {}),
        output_schema=_document(message, "output_schema", None),
    )


def _model_from_proto(model: common_pb2.ModelConfig) -> ModelConfig:
    temperature = model.temperature if model.HasField("temperature") else None
    return ModelConfig(
        provider=model.provider or DEFAULT_PROVIDER,
        name=model.name,
        # float32 on the wire: 0.2 arrives as 0.2000000029...; keep what the user meant.
        temperature=round(temperature, 6) if temperature is not None else None,
        max_output_tokens=model.max_output_tokens if model.HasField("max_output_tokens") else None,
        extra=_document(model, "extra", {}),
        fallback_models=tuple(model.fallback_models),
        fallback_wait_s=(
            round(model.fallback_wait_s, 3) if model.HasField("fallback_wait_s") else None
        ),
    )


def definition_to_proto(definition: AgentDefinition) -> common_pb2.AgentDefinition:
    """A stored definition as the proto message."""
    copied = (*_SAME_SCALARS, *_SAME_LISTS, *_OPTIONAL, *_OUTPUT_ONLY)
    model = definition.model
    message = common_pb2.AgentDefinition(
        **{f: getattr(definition, f) for f in copied},
        id=str(definition.id) if definition.id else "",
        model=common_pb2.ModelConfig(
            provider=model.provider,
            name=model.name,
            temperature=model.temperature,
            max_output_tokens=model.max_output_tokens,
            extra=to_struct(model.extra) if model.extra else None,
            fallback_models=list(model.fallback_models),
            fallback_wait_s=model.fallback_wait_s,
        ),
        flow_type=_FLOW_TO_PROTO[definition.flow_type],
        max_iterations=definition.max_iterations or 0,
        visibility=_VISIBILITY_TO_PROTO[definition.visibility],
        trigger=definition.trigger or "",
        config=to_struct(definition.config),
        create_time=timestamp_proto(definition.created_at),
        update_time=timestamp_proto(definition.updated_at),
        output_schema=(
            to_struct(definition.output_schema) if definition.output_schema is not None else None
        ),
    )
    if definition.default_timeout_s is not None:
        duration = duration_pb2.Duration()
        duration.FromTimedelta(timedelta(seconds=definition.default_timeout_s))
        message.default_timeout.CopyFrom(duration)
    return message


def _member_view(product: Product) -> Product:
    """The product with its manifest's MCP settings as a member may read them."""
    mcp = product.manifest.get("mcp")
    if not isinstance(mcp, dict) or not mcp.get("servers"):
        return product
    servers = [member_view(s) for s in mcp["servers"]]
    return dataclasses.replace(
        product, manifest={**product.manifest, "mcp": {**mcp, "servers": servers}}
    )


def product_to_proto(product: Product) -> registry_pb2.Product:
    same = ("name", "version", "agent_names", "mcp_server_names")
    return registry_pb2.Product(
        **{f: getattr(product, f) for f in same},
        manifest=to_struct(product.manifest),
        install_time=timestamp_proto(product.installed_at),
        update_time=timestamp_proto(product.updated_at),
    )


def _install_response(result: InstallResult) -> registry_pb2.InstallProductResponse:
    # The response's fields are named like the result's.
    return registry_pb2.InstallProductResponse(
        product=product_to_proto(result.product), **result.changes()
    )


def _document(message: Any, field: str, default: Any) -> Any:
    """The Struct ``message.<field>`` as a dict, or ``default`` when it is unset."""
    return struct_dict(getattr(message, field)) if message.HasField(field) else default
