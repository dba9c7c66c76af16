"""ToolPoolService: protobuf <-> domain for tools. RPCs arrive with the toolpool issue."""

from __future__ import annotations

from agentfleet.grpc_server import Registration
from agentfleet.service_runtime import ServiceContext, ServiceParts
from agentfleet.v1 import toolpool_pb2, toolpool_pb2_grpc

# Changing what a project's agents can reach is an administrator's act.
ADMIN_METHODS = ("UpsertMcpServer", "DeleteMcpServer", "SetSecret", "DeleteSecret")


class ToolPoolServicer(toolpool_pb2_grpc.ToolPoolServiceServicer):
    """Every RPC answers UNIMPLEMENTED until the toolpool issue fills it in."""


async def build(context: ServiceContext) -> ServiceParts:
    return ServiceParts(
        registrations=[
            Registration.of(
                toolpool_pb2,
                toolpool_pb2_grpc,
                "ToolPoolService",
                ToolPoolServicer(),
                admin_methods=ADMIN_METHODS,
            )
        ]
    )
