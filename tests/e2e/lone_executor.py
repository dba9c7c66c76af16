"""An executor process with a scripted toolpool of the test's own: the crash and restart
tests count what the toolpool executed, so they serve its gRPC API themselves."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from agentfleet.auth import AllowAll
from agentfleet.gemini_stub import GeminiStub
from agentfleet.rpc.grpc_server import Registration, start_server
from agentfleet.testing.services import ProcessStack, start_process_stack
from agentfleet.v1 import toolpool_pb2, toolpool_pb2_grpc

__all__ = ["NoTools", "serve_toolpool", "start_executor"]


class NoTools(toolpool_pb2_grpc.ToolPoolServiceServicer):
    """A toolpool for agents that call no tool: it resolves none."""

    async def ResolveTools(self, request, context):  # type: ignore[no-untyped-def]
        return toolpool_pb2.ResolveToolsResponse()


@contextlib.asynccontextmanager
async def serve_toolpool(servicer: toolpool_pb2_grpc.ToolPoolServiceServicer) -> AsyncIterator[str]:
    """``servicer`` as ToolPoolService on a loopback port; yields its address."""
    server = await start_server(
        host="127.0.0.1",
        port=0,
        registrations=[
            Registration.of(toolpool_pb2, toolpool_pb2_grpc, "ToolPoolService", servicer)
        ],
        authenticator=AllowAll(),
    )
    try:
        yield f"127.0.0.1:{server.port}"
    finally:
        await server.stop(0.5)


async def start_executor(
    database_url: str, log_dir: Path, stub: GeminiStub, toolpool_addr: str, **environ: str
) -> ProcessStack:
    """An executor process with short leases (a dead one's runs are taken over in ~1.5 s),
    its model the stub and its toolpool the test's; ``environ`` adds settings."""
    return await start_process_stack(
        database_url=database_url,
        log_dir=log_dir,
        names=("executor",),
        environ={
            "AGENTFLEET_AUTH": "off",
            "AGENTFLEET_GEMINI_BASE_URL": stub.base_url or "",
            "AGENTFLEET_TOOLPOOL_ADDR": toolpool_addr,
            "AGENTFLEET_EXECUTOR_LEASE_S": "1.5",
            "AGENTFLEET_EXECUTOR_HEARTBEAT_S": "0.3",
            **environ,
        },
    )
