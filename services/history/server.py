"""HistoryService: protobuf <-> domain for run history. RPCs arrive with the history issue."""

from __future__ import annotations

from agentfleet.grpc_server import Registration
from agentfleet.service_runtime import ServiceContext, ServiceParts
from agentfleet.v1 import history_pb2, history_pb2_grpc


class HistoryServicer(history_pb2_grpc.HistoryServiceServicer):
    """Every RPC answers UNIMPLEMENTED until the history issue fills it in."""


async def build(context: ServiceContext) -> ServiceParts:
    return ServiceParts(
        registrations=[
            Registration.of(history_pb2, history_pb2_grpc, "HistoryService", HistoryServicer())
        ]
    )
