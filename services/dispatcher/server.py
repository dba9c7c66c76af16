"""DispatcherService: protobuf <-> domain for task DAGs. RPCs arrive with the dispatcher issue."""

from __future__ import annotations

from agentfleet.grpc_server import Registration
from agentfleet.service_runtime import ServiceContext, ServiceParts
from agentfleet.v1 import dispatcher_pb2, dispatcher_pb2_grpc


class DispatcherServicer(dispatcher_pb2_grpc.DispatcherServiceServicer):
    """Every RPC answers UNIMPLEMENTED until the dispatcher issue fills it in."""


async def build(context: ServiceContext) -> ServiceParts:
    return ServiceParts(
        registrations=[
            Registration.of(
                dispatcher_pb2, dispatcher_pb2_grpc, "DispatcherService", DispatcherServicer()
            )
        ]
    )
