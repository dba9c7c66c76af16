"""``python -m tests.e2e.blocking_history``: a history process built by the services' own
runtime (settings, database, gRPC server, metrics, loop watch) whose GetRun computes for
:data:`HOLD_S` without awaiting, as a handler doing heavy work on the loop would. ListRuns
answers at once: the cheap call another project makes meanwhile."""

from __future__ import annotations

import time

import grpc

from agentfleet.process.service_runtime import ServiceContext, ServiceParts, run_service
from agentfleet.rpc.grpc_server import Registration
from agentfleet.v1 import history_pb2, history_pb2_grpc

HOLD_S = 1.5


class BlockingHistory(history_pb2_grpc.HistoryServiceServicer):
    async def GetRun(
        self, request: history_pb2.GetRunRequest, context: grpc.aio.ServicerContext
    ) -> history_pb2.GetRunResponse:
        deadline = time.monotonic() + HOLD_S
        while time.monotonic() < deadline:  # Python work holding the loop, no await
            pass
        return history_pb2.GetRunResponse()

    async def ListRuns(
        self, request: history_pb2.ListRunsRequest, context: grpc.aio.ServicerContext
    ) -> history_pb2.ListRunsResponse:
        return history_pb2.ListRunsResponse()


async def build(_context: ServiceContext) -> ServiceParts:
    servicer = BlockingHistory()
    return ServiceParts(
        registrations=[Registration.of(history_pb2, history_pb2_grpc, "HistoryService", servicer)]
    )


if __name__ == "__main__":
    run_service("history", build)
