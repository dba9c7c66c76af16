"""ExecutorService and AgentRegistryService: protobuf <-> domain. RPCs arrive with the
executor issue."""

from __future__ import annotations

from agentfleet.grpc_server import Registration
from agentfleet.service_runtime import ServiceContext, ServiceParts
from agentfleet.v1 import executor_pb2, executor_pb2_grpc, registry_pb2, registry_pb2_grpc
from services.executor.definitions import DefinitionRepository
from services.executor.registry import ProductRegistry
from services.executor.registry_server import AgentRegistryServicer

# Installing products and editing definitions changes what runs: administrators only.
REGISTRY_ADMIN_METHODS = (
    "InstallProduct",
    "UninstallProduct",
    "UpsertAgentDefinition",
    "DeleteAgentDefinition",
)


class ExecutorServicer(executor_pb2_grpc.ExecutorServiceServicer):
    """Every RPC answers UNIMPLEMENTED until the executor issue fills it in."""


async def build(context: ServiceContext) -> ServiceParts:
    definitions = DefinitionRepository(context.pool)
    return ServiceParts(
        registrations=[
            Registration.of(executor_pb2, executor_pb2_grpc, "ExecutorService", ExecutorServicer()),
            Registration.of(
                registry_pb2,
                registry_pb2_grpc,
                "AgentRegistryService",
                AgentRegistryServicer(ProductRegistry(context.pool, definitions), definitions),
                admin_methods=REGISTRY_ADMIN_METHODS,
            ),
        ]
    )
